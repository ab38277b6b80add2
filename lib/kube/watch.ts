/**
 * Decoding of a watch response body: newline-delimited JSON `{type, object}` frames
 * (Kubernetes API concepts, "Efficient detection of changes"), with an idle bound so that a stream
 * that stops delivering bytes without closing is noticed.
 *
 * @module
 */
import { ApiError, type Status } from "./errors.ts";

/** One frame of a watch stream. BOOKMARK carries only `metadata.resourceVersion`. */
export type WatchEvent<T> =
  | { type: "ADDED" | "MODIFIED" | "DELETED"; object: T }
  | { type: "BOOKMARK"; object: T }
  | { type: "ERROR"; object: Status };

/** A watch event that carries an object (ERROR frames are thrown instead of yielded). */
export type ObjectWatchEvent<T> = Exclude<WatchEvent<T>, { type: "ERROR" }>;

/** Thrown when a watch stream delivered no byte (bookmarks included) for longer than its bound. */
export class WatchIdleError extends Error {
  /** The bound that was exceeded (ms). */
  readonly idleMs: number;
  /** @param idleMs the bound that was exceeded (ms) */
  constructor(idleMs: number) {
    super(`watch stream delivered nothing for ${idleMs} ms`);
    this.name = "WatchIdleError";
    this.idleMs = idleMs;
  }
}

/**
 * Yields watch events from a response body. An ERROR frame is thrown as {@link ApiError} (its
 * `code` 410 means the resourceVersion expired: relist). When no byte arrives for `idleMs`,
 * `onIdle` is called (it should abort the request) and {@link WatchIdleError} is thrown.
 *
 * @param body the response body stream
 * @param idleMs idle bound in ms; 0 disables it
 * @param onIdle called once when the bound is exceeded, before throwing
 */
export async function* decodeWatchStream<T>(
  body: ReadableStream<Uint8Array>,
  idleMs: number,
  onIdle: () => void,
): AsyncGenerator<ObjectWatchEvent<T>> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  let idle = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const arm = () => {
    if (!idleMs) return;
    clearTimeout(timer);
    timer = setTimeout(() => {
      idle = true;
      onIdle();
      reader.cancel().catch(() => {});
    }, idleMs);
  };
  try {
    arm();
    while (true) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (err) {
        if (idle) throw new WatchIdleError(idleMs);
        throw err;
      }
      if (idle) throw new WatchIdleError(idleMs);
      if (chunk.done) break;
      arm();
      buffered += decoder.decode(chunk.value, { stream: true });
      let nl: number;
      while ((nl = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, nl).trim();
        buffered = buffered.slice(nl + 1);
        if (!line) continue;
        const ev = JSON.parse(line) as WatchEvent<T>;
        if (ev.type === "ERROR") {
          const st = ev.object as Status;
          throw new ApiError(st.code ?? 500, st, { request: "WATCH" });
        }
        yield ev as ObjectWatchEvent<T>;
      }
    }
  } finally {
    clearTimeout(timer);
    // Closes the connection when the consumer stops early or on error; harmless when done.
    await reader.cancel().catch(() => {});
  }
}
