/**
 * Watches: opening one and following its life ({@link openWatch}: the bound on its headers, its
 * place among the streams the stall rule looks at, what its end says about the path), and
 * decoding its response body: newline-delimited JSON `{type, object}` frames (Kubernetes API
 * concepts, "Efficient detection of changes"), with an idle bound so that a stream that stops
 * delivering bytes without closing is noticed.
 *
 * @module
 */
import { ApiError, NetworkError, type Status } from "./errors.ts";
import { type RawRequest, type WatchOptions, watchQuery } from "./params.ts";
import type { InFlight } from "./transport.ts";

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
  /**
   * The error for a stream silent past its bound.
   * @param idleMs the bound that was exceeded (ms)
   */
  constructor(idleMs: number) {
    super(`watch stream delivered nothing for ${idleMs} ms`);
    this.name = "WatchIdleError";
    this.idleMs = idleMs;
  }
}

/**
 * Thrown when the client ended a watch on purpose so that its consumer opens it again (from the
 * last resourceVersion it applied, at once, without backoff): its connection is presumed dead
 * (`stalled`: nothing came on it since the path to the apiserver failed, and a later request got
 * through), or the credentials changed (`credentials`: a rotated CA or client certificate, so
 * the watch reconnects with the new material and the old HTTP client can be closed).
 */
export class WatchRestartError extends Error {
  /** Why the watch was ended. */
  readonly why: "stalled" | "credentials";
  /**
   * Makes the error that ends a watch the client restarts on purpose.
   * @param why see {@link WatchRestartError.why}
   * @param detail one line for logs
   */
  constructor(why: "stalled" | "credentials", detail: string) {
    super(`watch restarted: ${detail}`);
    this.name = "WatchRestartError";
    this.why = why;
  }
}

/**
 * Longest frame (characters) a watch stream may send: a frame is one object, and the apiserver
 * stores objects of at most ~1.5 MiB (etcd's request limit), so 64 MiB without a newline is a
 * broken or hostile stream, not a big object. Bounds the decoder's memory.
 */
export const MAX_WATCH_FRAME_CHARS = 64 * 1024 * 1024;

/**
 * Longest delay a timer holds (ms): 2^31 - 1. Deno, as browsers and Node, fires a longer one at
 * once; a longer idle bound is waited for in steps of this.
 */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Yields the watch events of a response body in batches: every complete frame of a chunk read from
 * the body comes in one array (in stream order, never empty), so the consumer pays one async step
 * per chunk (the transport delivers ~16 KiB, some 20 events of a typical object) instead of one per
 * event. An ERROR frame is thrown as {@link ApiError} after the frames before it were yielded (its
 * `code` 410 means the resourceVersion expired: relist). When no byte arrives for `idleMs`,
 * `onIdle` is called (it should abort the request) and {@link WatchIdleError} is thrown.
 *
 * Frames are newline-delimited JSON `{type, object}` (Kubernetes API concepts, "Efficient
 * detection of changes"); blank lines are skipped.
 *
 * @param body the response body stream (a fetch body; any other byte stream must answer a pending
 *   BYOB read when it closes, with `byobRequest.respond(0)`, as the Streams standard asks)
 * @param idleMs idle bound in ms; 0 disables it
 * @param onIdle called once when the bound is exceeded, before throwing
 * @param onChunk called for every chunk read (bytes arrived: the connection is alive)
 * @param stop when it aborts, the reader is cancelled at once and its reason thrown, whatever the
 *   body's own abort does: the end of a watch its consumer stopped must not wait for the server
 *   (docs/design/reflector.md, "Stopping a watch")
 * @throws ApiError for an ERROR frame; WatchIdleError past the idle bound; `stop`'s reason once it
 *   aborted; SyntaxError for a frame that is not JSON; Error for a frame longer than
 *   {@link MAX_WATCH_FRAME_CHARS}
 */
export async function* decodeWatchBatches<T>(
  body: ReadableStream<Uint8Array>,
  idleMs: number,
  onIdle: () => void,
  onChunk?: () => void,
  stop?: AbortSignal,
): AsyncGenerator<ObjectWatchEvent<T>[]> {
  const read = chunkReader(body);
  const reader = read.reader;
  const onStop = () => {
    reader.cancel().catch(() => {});
  };
  stop?.addEventListener("abort", onStop, { once: true });
  const decoder = new TextDecoder();
  // The start of a frame whose newline has not come yet.
  let rest = "";
  let idle = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  // The bound runs from the last byte (performance.now(), ms). One timer: a chunk only moves the
  // deadline, and a timer that fires before it is set again for the rest, so a busy stream costs a
  // clock read per chunk instead of a timer (docs/design/client.md, "Per-request costs").
  let lastByteMs = 0;
  const check = () => {
    const left = lastByteMs + idleMs - performance.now();
    if (left > 0) {
      timer = setTimeout(check, Math.min(left, MAX_TIMER_MS));
      return;
    }
    idle = true;
    onIdle();
    reader.cancel().catch(() => {});
  };
  const arm = () => {
    if (!idleMs) return;
    lastByteMs = performance.now();
    timer ??= setTimeout(check, Math.min(idleMs, MAX_TIMER_MS));
  };
  try {
    arm();
    while (true) {
      if (stop?.aborted) throw stop.reason;
      let chunk: Uint8Array | undefined;
      try {
        chunk = await read.next();
      } catch (err) {
        if (idle) throw new WatchIdleError(idleMs);
        if (stop?.aborted) throw stop.reason;
        throw err;
      }
      if (idle) throw new WatchIdleError(idleMs);
      if (stop?.aborted) throw stop.reason;
      if (!chunk) break;
      arm();
      onChunk?.();
      // decode() copies the bytes, so the reader may reuse the buffer for the next chunk.
      const piece = decoder.decode(chunk, { stream: true });
      // Only the new piece is searched: `rest` holds no newline, so a long frame costs linear,
      // not quadratic, time (the concatenation is a rope, flattened once by JSON.parse).
      const lastInPiece = piece.lastIndexOf("\n");
      if (lastInPiece < 0) {
        rest += piece;
        if (rest.length > MAX_WATCH_FRAME_CHARS) {
          throw new Error(`watch frame longer than ${MAX_WATCH_FRAME_CHARS} characters`);
        }
        continue;
      }
      const text = rest + piece;
      const last = rest.length + lastInPiece;
      rest = text.slice(last + 1);
      const batch: ObjectWatchEvent<T>[] = [];
      for (let start = 0; start <= last;) {
        const nl = text.indexOf("\n", start);
        const line = text.slice(start, nl);
        start = nl + 1;
        // Blank lines carry nothing; JSON.parse skips whitespace (a "\r") around a frame.
        if (!line.trim()) continue;
        const ev = JSON.parse(line) as WatchEvent<T>;
        if (ev.type === "ERROR") {
          if (batch.length) yield batch;
          const st = ev.object as Status;
          throw new ApiError(st.code ?? 500, st, { request: "WATCH" });
        }
        batch.push(ev);
      }
      if (batch.length) yield batch;
    }
  } finally {
    clearTimeout(timer);
    stop?.removeEventListener("abort", onStop);
    // Closes the connection when the consumer stops early or on error; harmless when done.
    await reader.cancel().catch(() => {});
  }
}

/** Bytes of the buffer a watch body is read into (one TLS record is at most 16 KiB). */
export const WATCH_READ_BUFFER_BYTES = 64 * 1024;

/**
 * Reads a body chunk by chunk. A byte stream (a fetch body) is read with a BYOB reader into one
 * reused buffer (the default reader allocates one per chunk; the measurement is in
 * docs/design/client.md, "Reading watch bodies"). Any other stream falls back to the default reader. `next()` resolves undefined at the end; the
 * chunk it gives is valid until the next call.
 */
function chunkReader(body: ReadableStream<Uint8Array>): {
  reader: ReadableStreamBYOBReader | ReadableStreamDefaultReader<Uint8Array>;
  next(): Promise<Uint8Array | undefined>;
} {
  let byob: ReadableStreamBYOBReader | undefined;
  try {
    byob = body.getReader({ mode: "byob" });
  } catch {
    // Not a byte stream.
  }
  if (byob) {
    const reader = byob;
    let buf = new ArrayBuffer(WATCH_READ_BUFFER_BYTES);
    return {
      reader,
      async next() {
        for (let empty = 0; empty < 1_000; empty++) {
          const r = await reader.read(new Uint8Array(buf));
          if (r.done) return undefined;
          // The buffer was transferred into the view; take it back for the next read.
          buf = r.value.buffer as ArrayBuffer;
          if (r.value.byteLength > 0) return r.value;
        }
        throw new Error("watch body: 1,000 empty reads in a row");
      },
    };
  }
  const reader = body.getReader();
  return {
    reader,
    async next() {
      const r = await reader.read();
      return r.done ? undefined : r.value;
    },
  };
}

/**
 * Yields watch events from a response body one by one: {@link decodeWatchBatches} flattened, with
 * the same errors. Convenient where events are few; bulk consumers (the reflector) take batches.
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
  for await (const batch of decodeWatchBatches<T>(body, idleMs, onIdle)) {
    for (const ev of batch) yield ev;
  }
}

/** What {@link openWatch} uses of its client. */
export interface WatchDeps {
  /** Sends a request with the client's retries and returns the successful Response. */
  send(req: RawRequest): Promise<Response>;
  /** The client's open watch streams (the stall rule ends the silent ones). */
  watches: Set<InFlight>;
  /** The client's request timeout (ms): a WatchList's bound on its headers. */
  requestTimeoutMs: number;
  /** Health of the path. */
  health: { readonly healthy: boolean };
  /** Tells the health of a failure of the path. */
  failed(err: unknown): void;
  /** Drops the pooled connections (they may sit on a stalled path). */
  resetConnections(): void;
  /** A stream was added to `watches`. */
  opened(): void;
  /** A stream was removed from `watches` (or never added). */
  closed(): void;
}

/**
 * Opens a watch of `path` and yields its events in batches until the server ends the stream;
 * `KubeClient.watchBatches` (lib/kube/client.ts) documents the contract. The response headers
 * are bounded by `headersTimeoutMs` (default `idleTimeoutMs`), a WatchList's by the request
 * timeout when that is shorter ({@link headersBound}).
 * @throws what `KubeClient.watchBatches` documents
 */
export async function* openWatch<T>(
  deps: WatchDeps,
  path: string,
  o: WatchOptions,
): AsyncGenerator<ObjectWatchEvent<T>[]> {
  const ctl = new AbortController();
  const onAbort = () => ctl.abort(o.signal?.reason);
  o.signal?.addEventListener("abort", onAbort, { once: true });
  const bound = headersBound(path, o, deps.requestTimeoutMs);
  const headersTimer = bound.ms > 0
    ? setTimeout(() => ctl.abort(bound.noAnswer ?? new WatchIdleError(bound.ms)), bound.ms)
    : undefined;
  let stream: InFlight | undefined;
  try {
    const resp = await deps.send({
      method: "GET",
      path,
      signal: ctl.signal,
      stream: true,
      query: watchQuery(o),
    });
    clearTimeout(headersTimer);
    if (!resp.body) return;
    const s: InFlight = stream = streamOpened(deps, ctl, o);
    // Bytes on this stream show that its connection is alive, not that new ones work: they keep
    // it from the stall rule but do not end a failing episode (a request's answer does).
    yield* decodeWatchBatches<T>(resp.body, o.idleTimeoutMs ?? 0, () => ctl.abort(), () => {
      s.lastByteMs = Date.now();
    }, ctl.signal);
  } catch (err) {
    throw watchFailed(deps, err, o, ctl.signal, bound.noAnswer, stream);
  } finally {
    clearTimeout(headersTimer);
    o.signal?.removeEventListener("abort", onAbort);
    if (stream) deps.watches.delete(stream);
    deps.closed();
    ctl.abort();
  }
}

/**
 * The bound on a watch's response headers (ms; 0: none) and, for a WatchList bounded like a
 * list, the error it fails with. A WatchList's headers come only once the apiserver has the
 * state to send (its watch cache caught up with etcd's current revision), as a list's answer
 * does: that wait is bounded by the request timeout, and failing it is a failed request (a
 * {@link NetworkError} of kind `timeout`), not an idle watch.
 */
export function headersBound(
  path: string,
  o: WatchOptions,
  requestTimeoutMs: number,
): { ms: number; noAnswer?: NetworkError } {
  const idleMs = o.idleTimeoutMs ?? 0;
  if (o.sendInitialEvents && (idleMs === 0 || requestTimeoutMs < idleMs)) {
    const label = `GET ${path} (watch list)`;
    const why = `no answer within ${requestTimeoutMs / 1000} s`;
    const noAnswer = new NetworkError("timeout", { method: "GET", path, label }, why);
    return { ms: requestTimeoutMs, noAnswer };
  }
  return { ms: o.headersTimeoutMs ?? idleMs };
}

/** A watch's headers came: track the stream for the stall rule and tell `onOpen`. */
function streamOpened(deps: WatchDeps, ctl: AbortController, o: WatchOptions): InFlight {
  const s: InFlight = { ctl, sentAtMs: Date.now(), lastByteMs: Date.now() };
  deps.watches.add(s);
  deps.opened();
  try {
    o.onOpen?.();
  } catch { /* reporting must not break the stream */ }
  return s;
}

/**
 * The error a watch ends with, telling the health what it says about the path: no answer to a
 * WatchList within its bound, no headers within the bound, a silence that is a failure (see
 * `WatchOptions.idleIsFailure`) and a stream broken mid-way are failures of the path; an ERROR
 * frame (an answer), the caller's abort and a restart by the client are not.
 */
function watchFailed(
  deps: WatchDeps,
  err: unknown,
  o: WatchOptions,
  signal: AbortSignal,
  noAnswer: NetworkError | undefined,
  stream: InFlight | undefined,
): unknown {
  if (o.signal?.aborted) return o.signal.reason;
  if (signal.reason instanceof WatchRestartError) return signal.reason;
  if (noAnswer && signal.reason === noAnswer) {
    // As a list without an answer within its timeout: the pooled connections may be dead.
    deps.failed(noAnswer);
    deps.resetConnections();
    return noAnswer;
  }
  if (err instanceof WatchIdleError) {
    // No headers within the bound is a failure whatever the stream would carry; so is silence
    // while other requests get no answer either.
    const failure = typeof o.idleIsFailure === "function"
      ? o.idleIsFailure()
      : o.idleIsFailure !== false;
    if (failure || !stream || !deps.health.healthy) {
      deps.failed(err);
      deps.resetConnections();
    }
  } else if (stream && !(err instanceof ApiError)) {
    // The stream broke mid-way (a connection reset, a cut link).
    deps.failed(err);
  }
  return err;
}
