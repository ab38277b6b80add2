/**
 * Kubernetes Events through events.k8s.io/v1, written as client-go's `tools/events` broadcaster
 * writes them (k8s.io/client-go/tools/events/event_broadcaster.go): `regarding` the object,
 * `related` (e.g. the Pod), `reason` (UpperCamelCase), `action`, `note`, `type` Normal or Warning,
 * `reportingController` and `reportingInstance`.
 *
 * Repeats are aggregated, never dropped: events with the same type, action, reason, regarding and
 * related object (client-go's `eventKey`; objects compared by uid here, not by resourceVersion, so
 * a status write between two repeats does not start a new Event) are one Event object whose
 * `series` counts them. As in client-go's `recordToSink`: the first occurrence is created; the
 * second patches `series: {count: 2, lastObservedTime}` onto it at once; a series that sees no
 * repeat for {@link EVENT_SERIES_FINISH_MS} (client-go's `finishTime`, 6 min) is finished, and the
 * next occurrence starts a new Event. Where client-go writes later counts only every 30 minutes
 * (`refreshTime`), a count here is written at most {@link EVENT_SERIES_MIN_INTERVAL_MS} after it
 * changed, and at most once per that interval per Event: `kubectl describe` shows a current count,
 * and a burst of repeats costs one PATCH per interval, never a write per repeat (so a retry loop
 * cannot flood the apiserver, docs/scenarios.md S9). A series whose Event has gone (the apiserver's event TTL) is
 * created again, as client-go does on a patch's NotFound.
 *
 * A series keeps the note it was created with (client-go's series never changes it either; an
 * Event's note is fixed once written). When a repeat says something else (a kubelet's `back-off
 * 10s` that became `back-off 40s`), the series is finished (its last count written) and a new
 * Event starts with the new note, so the latest Event says what is true now; at most one new Event
 * per {@link EVENT_SERIES_MIN_INTERVAL_MS} per series: a note that changes faster (a counter in
 * the text) counts in the current series until the interval has passed since its Event began.
 *
 * A failed write is reported through `onError` as an {@link EventWriteError} that says whether
 * the Event may exist: a write the fence refused before it was sent ("not sent"), or one that was
 * in flight when leadership ended and was aborted ("aborted; may have reached the apiserver": the
 * bytes may already be on the way, and the apiserver may still apply them).
 *
 * Recording never blocks a reconcile and never throws: {@link EventRecorder.record} queues the
 * write and returns at once; at most {@link EVENT_WRITERS} writes are in flight and at most
 * {@link EVENT_QUEUE_LIMIT} new Events wait (more new ones are dropped and counted, as client-go's
 * broadcaster drops past its queue of 1,000; repeats only count). A write the apiserver refuses is
 * not retried (client-go: "Server rejected event (will not retry!)"). A refusal because the
 * namespace is being deleted is remembered in a {@link TerminatingNamespaces}: no further Event is
 * created there for the objects it holds (docs/scenarios.md S21), and it is not reported as an error.
 *
 * @module
 */
import type { KubeClient, KubeObject } from "../kube/client.ts";
import { ApiError, type FencedError, isFenced, isNotFound } from "../kube/errors.ts";
import { EVENTS } from "../kube/resources.ts";
import { type Clock, realClock } from "./clock.ts";
import { microTime } from "./leader.ts";
import type { TerminatingNamespaces } from "./namespaces.ts";

/** A series with no repeat for this long is finished (ms); client-go tools/events `finishTime`. */
export const EVENT_SERIES_FINISH_MS = 6 * 60_000;
/**
 * Least time between two writes of one Event's series (ms): our bound on series updates (client-go
 * writes count 2 at once and later counts every 30 min; here every change within this bound).
 */
export const EVENT_SERIES_MIN_INTERVAL_MS = 10_000;
/** Event writes in flight at once. */
export const EVENT_WRITERS = 4;
/** New Events waiting to be written beyond which new ones are dropped; client-go's queue, 1,000. */
export const EVENT_QUEUE_LIMIT = 1_000;
/** Finished series are swept from memory at most this often (ms). */
const SWEEP_INTERVAL_MS = 60_000;
/**
 * Longest `note` the API accepts, in bytes of UTF-8: events.k8s.io/v1 validation refuses a note
 * whose Go `len` (bytes, not characters) is over 1,024 (k8s.io/kubernetes
 * pkg/apis/core/validation/events.go, `NoteLengthLimit`).
 */
export const NOTE_MAX_BYTES = 1024;

const utf8 = new TextEncoder();

/**
 * `text` cut to at most `maxBytes` bytes of UTF-8 at a character boundary, with `…` in place of
 * what was cut (so the cut shows); `text` itself when it fits. A limit the API counts in bytes
 * must be cut in bytes: a note of 400 Japanese characters (1,200 bytes) is refused whole, and the
 * Event with it (422 `can have at most 1024 characters`).
 * @param text any string (lone surrogates count as the 3 bytes of U+FFFD they are sent as)
 * @param maxBytes the limit in bytes; at least 3
 */
export function clipUtf8(text: string, maxBytes: number): string {
  // Fast path: every UTF-16 unit is at most 3 bytes of UTF-8.
  if (text.length * 3 <= maxBytes || utf8.encode(text).length <= maxBytes) return text;
  const budget = maxBytes - 3; // "…" is 3 bytes
  let used = 0;
  let end = 0;
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    const n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    if (used + n > budget) break;
    used += n;
    end += ch.length;
  }
  return `${text.slice(0, end)}…`;
}

/** What one event says. */
export interface EventSpec {
  /** `Normal` for what went as intended, `Warning` for what needs attention. */
  type: "Normal" | "Warning";
  /** Short UpperCamelCase reason, e.g. `PodCreated`. */
  reason: string;
  /** What the controller did or failed to do, e.g. `Create`. */
  action: string;
  /** Human-readable detail, at most 1 kB (longer is cut). */
  note: string;
  /** A related object, e.g. the Pod, if any. */
  related?: KubeObject;
}

/** Options of {@link EventRecorder}. */
export interface EventRecorderOptions {
  /**
   * Told when a write fails (events are best effort), with an {@link EventWriteError} (the
   * client's error as its `cause`); not told of namespace refusals.
   */
  onError?: (err: unknown) => void;
  /** Namespaces being deleted: Events for the objects it holds are not created (docs/scenarios.md S21). */
  terminating?: TerminatingNamespaces;
  /** Time source and timers; injected in tests. */
  clock?: Clock;
  /** Overrides {@link EVENT_SERIES_MIN_INTERVAL_MS}. */
  seriesMinIntervalMs?: number;
}

/**
 * Whether a fenced write was refused before it was sent: neither aborted in flight (the fence's
 * abort of writes already handed to `fetch`, {@link FencedError.inFlight}) nor refused by the
 * apiserver (reason `NotLeaseHolder`: it was sent and answered).
 */
export function fencedBeforeSending(err: FencedError): boolean {
  return !err.inFlight && err.reason !== "NotLeaseHolder";
}

/**
 * A failed Event write, as {@link EventRecorder} reports it through `onError`: which Event, and
 * whether it may still exist (`sent`: "no" when nothing left this process, "maybe" when the
 * request was aborted in flight or failed without an answer, "yes" when the apiserver answered).
 * `cause` is the client's error.
 */
export class EventWriteError extends Error {
  /** Whether the request may have reached the apiserver. */
  readonly sent: "no" | "maybe" | "yes";

  /** Describes the failed write of the Event `reason` about `regarding` (`kind/name`). */
  constructor(reason: string, regarding: string, cause: unknown) {
    let sent: "no" | "maybe" | "yes";
    let why: string;
    if (isFenced(cause)) {
      if (cause.reason === "NotLeaseHolder") {
        sent = "yes";
        why = `refused by the apiserver: not the Lease holder (${cause.request})`;
      } else if (fencedBeforeSending(cause)) {
        sent = "no";
        why = `not sent (${
          cause.reason === "NotHeld"
            ? "this process does not hold the Lease"
            : "the last Lease renewal is past the renew deadline"
        })`;
      } else {
        sent = "maybe";
        why = `aborted; may have reached the apiserver (${cause.request})`;
      }
    } else {
      sent = cause instanceof ApiError ? "yes" : "maybe";
      why = cause instanceof Error ? cause.message : String(cause);
    }
    super(`Event ${reason} about ${regarding}: ${why}`, { cause });
    this.name = "EventWriteError";
    this.sent = sent;
  }
}

/** One isomorphic event: the Event object and its series count. */
interface Series {
  key: string;
  namespace: string;
  /** Name of the regarding object: Events are named `<name>.<hex>`. */
  baseName: string;
  regardingUid?: string;
  /** The Event as created (name set once created). */
  event: KubeObject & { series?: { count: number; lastObservedTime: string } };
  /** Occurrences seen. */
  count: number;
  /** The count the apiserver holds (0: not created yet). */
  written: number;
  lastObservedMs: number;
  lastWriteMs: number;
  /** When its Event began (ms): the first occurrence. */
  startedMs: number;
  /** Replaced by a series with a newer note: only its last count remains to be written. */
  finished?: boolean;
  /** Queued or being written. */
  busy: boolean;
  timer?: unknown;
}

/** Writes Events; see the module doc. */
export class EventRecorder {
  #client: KubeClient;
  #controller: string;
  #instance: string;
  #onError: (err: unknown) => void;
  #terminating?: TerminatingNamespaces;
  #clock: Clock;
  #intervalMs: number;
  #series = new Map<string, Series>();
  #queue: Series[] = [];
  #writers = 0;
  #idle: (() => void)[] = [];
  #seq = 0;
  #lastSweepMs = 0;
  /** New Events dropped because the queue was full. */
  dropped = 0;
  /** Events not created because their namespace is being deleted. */
  suppressed = 0;
  /** Writes made: creates and series patches (for tests). */
  readonly writes = { create: 0, patch: 0 };

  /**
   * A recorder writing through `client`; nothing is written until {@link EventRecorder.record}.
   * @param client writes the events
   * @param reportingController e.g. `apps.our-org.com/appservice-operator`
   * @param reportingInstance this process's identity
   * @param opts see {@link EventRecorderOptions}; a function is taken as `onError` (older form)
   */
  constructor(
    client: KubeClient,
    reportingController: string,
    reportingInstance: string,
    opts: EventRecorderOptions | ((err: unknown) => void) = {},
  ) {
    const o = typeof opts === "function" ? { onError: opts } : opts;
    this.#client = client;
    this.#controller = reportingController;
    this.#instance = reportingInstance;
    this.#onError = o.onError ?? (() => {});
    this.#terminating = o.terminating;
    this.#clock = o.clock ?? realClock;
    this.#intervalMs = o.seriesMinIntervalMs ?? EVENT_SERIES_MIN_INTERVAL_MS;
  }

  /**
   * Records an event about `regarding` (in its namespace) and returns at once: a new Event is
   * queued for creation, a repeat counts in its series (see the module doc). Never throws; a
   * failed write is reported through `onError`.
   */
  record(regarding: KubeObject, e: EventSpec): void {
    const m = regarding.metadata ?? {};
    const namespace = m.namespace ?? "default";
    if (this.#terminating?.has(namespace, m.uid)) {
      this.suppressed++;
      return;
    }
    const now = this.#clock.now();
    this.#sweep(now);
    const key = [
      e.type,
      e.action,
      e.reason,
      regarding.kind,
      namespace,
      m.name,
      m.uid,
      e.related?.kind,
      e.related?.metadata?.namespace,
      e.related?.metadata?.name,
      e.related?.metadata?.uid,
    ].join("|");
    const s = this.#series.get(key);
    const note = clipUtf8(e.note, NOTE_MAX_BYTES);
    const noteChanged = s !== undefined && (s.event as { note?: string }).note !== note &&
      now - s.startedMs >= this.#intervalMs;
    if (s && now - s.lastObservedMs < EVENT_SERIES_FINISH_MS && !noteChanged) {
      s.count++;
      s.lastObservedMs = now;
      this.#schedule(s, now);
      return;
    }
    if (s && noteChanged) {
      // Its last count is still written (at once), then the new note starts a new Event.
      s.finished = true;
      this.#clock.clearTimer(s.timer);
      s.timer = undefined;
      if (s.written > 0 && s.count > s.written) this.#enqueue(s);
    } else if (s) {
      this.#clock.clearTimer(s.timer);
    }
    if (this.#pendingCreates() >= EVENT_QUEUE_LIMIT) {
      this.dropped++;
      return;
    }
    const fresh: Series = {
      key,
      namespace,
      baseName: m.name ?? "event",
      regardingUid: m.uid,
      event: this.#build(regarding, e, now),
      count: 1,
      written: 0,
      lastObservedMs: now,
      lastWriteMs: 0,
      startedMs: now,
      busy: false,
    };
    this.#series.set(key, fresh);
    this.#enqueue(fresh);
  }

  /**
   * Writes every pending series count now (ignoring the interval) and resolves when no write is
   * queued or in flight: for shutdown, as client-go's `finishSeries` writes the final count.
   */
  flush(): Promise<void> {
    for (const s of this.#series.values()) {
      if (s.count > s.written && s.written > 0 && !s.busy) {
        this.#clock.clearTimer(s.timer);
        s.timer = undefined;
        this.#enqueue(s);
      }
    }
    if (this.#queue.length === 0 && this.#writers === 0) return Promise.resolve();
    return new Promise((r) => this.#idle.push(r));
  }

  /** Series held in memory (for tests). */
  get seriesCount(): number {
    return this.#series.size;
  }

  #pendingCreates(): number {
    let n = 0;
    for (const s of this.#queue) if (s.written === 0) n++;
    return n;
  }

  /** Queues a series write now, or sets a timer for when the interval allows it. */
  #schedule(s: Series, now: number): void {
    if (s.busy || s.timer !== undefined || s.written === 0 || s.count <= s.written) return;
    // The first repeat is written at once (client-go); later counts at most once per interval.
    const dueMs = s.written === 1 ? 0 : s.lastWriteMs + this.#intervalMs - now;
    if (dueMs <= 0) {
      this.#enqueue(s);
      return;
    }
    s.timer = this.#clock.setTimer(() => {
      s.timer = undefined;
      if (this.#series.get(s.key) === s) this.#enqueue(s);
    }, dueMs);
  }

  #enqueue(s: Series): void {
    if (s.busy) return;
    s.busy = true;
    this.#queue.push(s);
    this.#pump();
  }

  #pump(): void {
    while (this.#writers < EVENT_WRITERS && this.#queue.length > 0) {
      const s = this.#queue.shift()!;
      this.#writers++;
      this.#write(s).finally(() => {
        this.#writers--;
        s.busy = false;
        if (this.#series.get(s.key) === s) {
          this.#schedule(s, this.#clock.now());
        } else if (s.finished && s.written > 0 && s.count > s.written) {
          this.#enqueue(s); // repeats counted while its last write was in flight
        }
        this.#pump();
        if (this.#writers === 0 && this.#queue.length === 0) {
          for (const r of this.#idle.splice(0)) r();
        }
      });
    }
  }

  /** Creates the Event, or patches its series; on any failure the series is forgotten. */
  async #write(s: Series): Promise<void> {
    const count = s.count;
    const series = count > 1 ? { count, lastObservedTime: microTime(s.lastObservedMs) } : undefined;
    try {
      if (s.written > 0) {
        try {
          await this.#client.patch(EVENTS, s.event.metadata!.name!, { series }, {
            namespace: s.namespace,
            type: "merge",
            response: "none",
          });
          this.writes.patch++;
          s.written = count;
          s.lastWriteMs = this.#clock.now();
          return;
        } catch (err) {
          if (!isNotFound(err)) throw err;
          // The Event expired (event TTL): create it again with its count, under a new name.
          s.event = { ...s.event, metadata: { ...s.event.metadata, name: this.#name(s.baseName) } };
        }
      }
      const body = series ? { ...s.event, series } : s.event;
      await this.#client.create(EVENTS, body, { response: "none" });
      this.writes.create++;
      s.written = count;
      s.lastWriteMs = this.#clock.now();
    } catch (err) {
      this.#clock.clearTimer(s.timer);
      if (this.#series.get(s.key) === s) this.#series.delete(s.key);
      if (this.#terminating?.observe(s.namespace, s.regardingUid, err)) {
        this.suppressed++;
        return;
      }
      const ev = s.event as { reason?: string; regarding?: { kind?: string; name?: string } };
      this.#onError(
        new EventWriteError(
          ev.reason ?? "",
          `${ev.regarding?.kind ?? ""}/${ev.regarding?.name ?? s.baseName}`,
          err,
        ),
      );
    }
  }

  /** Forgets finished series (no repeat for the finish time, nothing left to write). */
  #sweep(now: number): void {
    if (now - this.#lastSweepMs < SWEEP_INTERVAL_MS) return;
    this.#lastSweepMs = now;
    for (const [k, s] of this.#series) {
      if (now - s.lastObservedMs >= EVENT_SERIES_FINISH_MS && !s.busy && s.count <= s.written) {
        this.#clock.clearTimer(s.timer);
        this.#series.delete(k);
      }
    }
  }

  /** client-go names events `<object>.<unix nanoseconds in hex>`. */
  #name(base: string): string {
    const now = this.#clock.now();
    return `${base}.${(BigInt(now) * 1_000_000n + BigInt(this.#seq++ % 1_000_000)).toString(16)}`;
  }

  #build(regarding: KubeObject, e: EventSpec, now: number): Series["event"] {
    const m = regarding.metadata ?? {};
    const ref = (o: KubeObject) => ({
      apiVersion: o.apiVersion,
      kind: o.kind,
      name: o.metadata?.name,
      namespace: o.metadata?.namespace,
      uid: o.metadata?.uid,
      resourceVersion: o.metadata?.resourceVersion,
    });
    return {
      apiVersion: "events.k8s.io/v1",
      kind: "Event",
      metadata: {
        name: this.#name(m.name ?? "event"),
        namespace: m.namespace ?? "default",
      },
      eventTime: microTime(now),
      reportingController: this.#controller,
      reportingInstance: this.#instance,
      action: e.action,
      reason: e.reason,
      note: clipUtf8(e.note, NOTE_MAX_BYTES),
      type: e.type,
      regarding: ref(regarding),
      related: e.related ? ref(e.related) : undefined,
    } as KubeObject;
  }
}
