/**
 * The reflector's state machine: an explicit {@link ReflectorState} union and one pure transition
 * function, {@link step}, from a state and what the last I/O step produced
 * ({@link ReflectorInput}) to the next state and the side effects to carry out
 * ({@link ReflectorEffect}). The {@link Reflector}'s run loop is the only I/O: it lists, watches
 * or sleeps as the state says and feeds the outcome back into `step`. The table of every
 * transition is in docs/design/reflector.md.
 *
 * Vocabulary: client-go's reflector (list, watch, relist, resourceVersion, backoff) and kube-rs
 * watcher's states (an initial list, then a watch from the list's resourceVersion, a 410 back to
 * the list).
 *
 * @module
 */
import { isGone } from "../kube/errors.ts";
import { WatchIdleError, WatchRestartError } from "../kube/watch.ts";

/** What the reflector reports as it goes (for logs, metrics and readiness). */
export type ReflectorEvent =
  | {
    type: "listed";
    resourceVersion: string;
    items: number;
    pages: number;
    added: number;
    updated: number;
    deleted: number;
  }
  | { type: "watchStarted"; resourceVersion: string }
  | { type: "watchEnded"; resourceVersion: string; events: number }
  | { type: "relist"; reason: "gone"; phase: "list" | "watch"; resourceVersion: string }
  /** A continue token expired mid-list (410): the list is read again in one piece. */
  | { type: "listExpired"; detail: string }
  /**
   * A watch delivered no byte for the idle bound and is reopened from the last resourceVersion.
   * `quiet`: nothing says its connection died — no bookmark was due on this stream (see
   * {@link bookmarkWasDue}), the watch had been accepted and the path to the apiserver is
   * healthy — so the silence is normal and the reopening is the liveness check, not a failure.
   * Otherwise (a bookmark missed, no headers, other requests failing too) the informer was deaf
   * and is marked so.
   */
  | { type: "idle"; resourceVersion: string; idleMs: number; quiet: boolean }
  | {
    type: "restart";
    why: WatchRestartError["why"];
    resourceVersion: string;
    detail: string;
  }
  | { type: "error"; phase: "list" | "watch"; error: unknown; retryInMs: number };

/**
 * A watch ending sooner than this (ms) without any event is a failure (backoff); client-go
 * reflector's "very short watch", 1 s.
 */
export const VERY_SHORT_WATCH_MS = 1_000;
/**
 * How often kube-apiserver sends a BOOKMARK to a watcher that allows them (ms): about every
 * minute (kube-apiserver cacher `defaultBookmarkFrequency`; see docs/design/reflector.md).
 */
export const APISERVER_BOOKMARK_INTERVAL_MS = 60_000;
/**
 * How late a due bookmark may come (ms): the cacher checks for due bookmarks on a 1 s timer with
 * 25% jitter, in whole-second buckets, so about 2.3 s; 5 s leaves room for a busy apiserver.
 */
export const BOOKMARK_SLACK_MS = 5_000;

/**
 * Whether a watch stream's silence of `idleMs` missed a bookmark the apiserver owed it, so that
 * the silence is evidence of a dead connection.
 *
 * kube-apiserver's watch cache sends a watcher a BOOKMARK about every
 * {@link APISERVER_BOOKMARK_INTERVAL_MS} (and 2 s before its timeout), but only once its cache of
 * the resource has moved past the resourceVersion the watch started at: a bookmark at or below
 * it is dropped (k8s.io/apiserver cacher, cacheWatcher.process). A watch reopened from the
 * resourceVersion of its last bookmark on a resource nobody writes gets no bookmark for as long
 * as that lasts, on a healthy path, and an apiserver without a watch cache sends none at all.
 * Once a stream has received one (its start is behind the cache, for good), the next is due
 * within the interval. So a bookmark was due only if this stream received one (`streamBookmarks`,
 * not counting the `initial-events-end` bookmark of a WatchList, which is sent on demand) and the
 * silence is longer than the interval plus {@link BOOKMARK_SLACK_MS}.
 *
 * @param streamBookmarks whether the silent stream received a cadence bookmark before
 * @param idleMs how long the stream was silent (ms)
 * @returns true when a bookmark was due during the silence
 */
export function bookmarkWasDue(streamBookmarks: boolean, idleMs: number): boolean {
  return streamBookmarks && idleMs > APISERVER_BOOKMARK_INTERVAL_MS + BOOKMARK_SLACK_MS;
}

/**
 * What a running reflector remembers across states (part of every running state).
 * - `resourceVersion`: of the last list or event applied ("" before the first); the next watch
 *   starts here, so no event is applied twice.
 * - `goneInARow`: 410 answers since the last watch that made progress; the first relists at once,
 *   a second in a row backs off first.
 * - `watchList`: the next sync uses WatchList (asked for, and the apiserver has not refused it).
 * - `listFromCache`: the next list reads the apiserver's watch cache (`resourceVersion=0`): only
 *   with `initialListFromCache`, until a list has been applied.
 * - `checkLiveness`: the next watch reopens a quiet stream, so its response headers are bounded
 *   (set by a quiet idle end, cleared once a watch is accepted).
 */
export interface ReflectorMemory {
  /** resourceVersion of the last list or event applied; "" before the first. */
  resourceVersion: string;
  /** 410 answers since the last progress (see the interface doc). */
  goneInARow: number;
  /** Whether the next sync uses WatchList. */
  watchList: boolean;
  /** Whether the next list reads the watch cache (`resourceVersion=0`). */
  listFromCache: boolean;
  /** Whether the next watch's response headers are bounded (it reopens a quiet stream). */
  checkLiveness: boolean;
}

/**
 * Where the reflector is, and what its run loop does there:
 * - `idle`: made, not running yet.
 * - `listing`: reads the whole state, by a paged list (`via: "list"`, a consistent read unless
 *   `fromCache`) or by WatchList (`via: "watchList"`), into the store; `cause` says why (`start`,
 *   `gone`: a 410 answered the last list or watch, `retry`: after a backoff).
 * - `watching`: streams changes from `memory.resourceVersion`.
 * - `backoff`: waits after a failure (the delay is the run loop's Backoff), then goes to `resume`.
 * - `stopped`: the run's signal aborted.
 */
export type ReflectorState =
  | { phase: "idle" }
  | {
    phase: "listing";
    via: "list" | "watchList";
    fromCache: boolean;
    cause: "start" | "gone" | "retry";
    memory: ReflectorMemory;
  }
  | { phase: "watching"; memory: ReflectorMemory }
  | { phase: "backoff"; error: string; resume: "listing" | "watching"; memory: ReflectorMemory }
  | { phase: "stopped" };

/** Facts about a watch that ended (normally or not), observed by the run loop. */
export interface WatchOutcome {
  /** resourceVersion of the last event the watch applied (bookmarks included); "" if none. */
  appliedResourceVersion: string;
  /** Whether the apiserver accepted the watch (its response headers arrived). */
  accepted: boolean;
  /**
   * Whether the watch received a cadence BOOKMARK (not the `initial-events-end` one of a
   * WatchList): from then on one is due about every minute ({@link bookmarkWasDue}).
   */
  bookmarks: boolean;
  /** Whether other requests to the apiserver get answers now (the client's ConnectionHealth). */
  healthy: boolean;
}

/**
 * What the run loop observed; the input of {@link step}.
 * - `start`: `run()` was called (with the reflector's options).
 * - `listed`: a list was applied to the store, ending at `resourceVersion`.
 * - `listFailed`: the list threw `error`.
 * - `listContinueExpired`: a later page of the list was answered 410 (its continue token expired);
 *   the client reads the list again in one piece, and the store's replace starts over.
 * - `watchListSynced`: a WatchList stream's initial events are complete (the
 *   `initial-events-end` bookmark came, at `resourceVersion`); the stream goes on as a watch.
 * - `watchListEnded`: a WatchList stream ended normally; `synced`: its initial events were
 *   complete.
 * - `watchListFailed`: a WatchList stream threw `error`.
 * - `watchProgress`: a watch applied events up to `resourceVersion` (once per chunk of the stream).
 * - `watchEnded`: a watch ended normally after `durationMs` with `events` events.
 * - `watchFailed`: a watch threw `error`.
 * - `backoffDone`: the backoff delay passed (or the path to the apiserver recovered).
 * - `stop`: the run's signal aborted.
 */
export type ReflectorInput =
  | { type: "start"; useWatchList: boolean; initialListFromCache: boolean }
  | { type: "listed"; resourceVersion: string }
  | { type: "listFailed"; error: unknown }
  | { type: "listContinueExpired"; detail: string }
  | { type: "watchListSynced"; resourceVersion: string }
  | { type: "watchListEnded"; synced: boolean } & WatchOutcome
  | { type: "watchListFailed"; error: unknown } & WatchOutcome
  | { type: "watchProgress"; resourceVersion: string }
  | { type: "watchEnded"; events: number; durationMs: number } & WatchOutcome
  | { type: "watchFailed"; error: unknown } & WatchOutcome
  | { type: "backoffDone" }
  | { type: "stop" };

/**
 * What the run loop carries out after a transition, in order:
 * - `report`: tell the event (logs, metrics; {@link ReflectorEvent}).
 * - `deaf`: mark the informer deaf with `reason` (kept until a watch is accepted or a list applied).
 * - `backoff`: a failure: take the next backoff delay, count the failure, report an `error` event
 *   for `phase` with that delay, and sleep it (the state is then `backoff`).
 */
export type ReflectorEffect =
  | { type: "report"; event: ReflectorEvent }
  | { type: "deaf"; reason: string }
  | { type: "backoff"; phase: "list" | "watch"; error: unknown };

/** A transition's result: the next state and the effects to carry out, in order. */
export interface Transition {
  /** The next state. */
  state: ReflectorState;
  /** Side effects, in order. */
  effects: ReflectorEffect[];
}

const NOTHING: ReflectorEffect[] = [];

/** The listing state that syncs next: WatchList if still allowed, else a list. */
function listing(memory: ReflectorMemory, cause: "start" | "gone" | "retry"): ReflectorState {
  return {
    phase: "listing",
    via: memory.watchList ? "watchList" : "list",
    fromCache: !memory.watchList && memory.listFromCache,
    cause,
    memory,
  };
}

function watching(memory: ReflectorMemory): ReflectorState {
  return { phase: "watching", memory };
}

/**
 * The one transition function of the reflector (pure: no I/O, no clock, no randomness).
 * @param state where the reflector is
 * @param input what the run loop observed in that state
 * @returns the next state and the effects to carry out; an input that does not apply to the
 *   state (e.g. `listed` while `watching`) leaves the state unchanged with no effect.
 */
export function step(state: ReflectorState, input: ReflectorInput): Transition {
  if (input.type === "stop") return { state: { phase: "stopped" }, effects: NOTHING };
  switch (state.phase) {
    case "idle":
      if (input.type !== "start") break;
      return {
        state: listing({
          resourceVersion: "",
          goneInARow: 0,
          watchList: input.useWatchList,
          listFromCache: input.initialListFromCache,
          checkLiveness: false,
        }, "start"),
        effects: NOTHING,
      };
    case "listing":
      return fromListing(state, input) ?? { state, effects: NOTHING };
    case "watching":
      return fromWatching(state, input) ?? { state, effects: NOTHING };
    case "backoff":
      if (input.type !== "backoffDone") break;
      return {
        state: state.resume === "listing" ? listing(state.memory, "retry") : watching(state.memory),
        effects: NOTHING,
      };
    case "stopped":
      break;
  }
  return { state, effects: NOTHING };
}

function fromListing(
  state: Extract<ReflectorState, { phase: "listing" }>,
  input: ReflectorInput,
): Transition | undefined {
  const memory = state.memory;
  switch (input.type) {
    case "listed":
      // A list applied: watch from its resourceVersion; later lists are consistent reads.
      return {
        state: watching({
          ...memory,
          resourceVersion: input.resourceVersion,
          listFromCache: false,
        }),
        effects: NOTHING,
      };
    case "listFailed":
      return failed(memory, "list", input.error, {
        accepted: true,
        bookmarks: false,
        healthy: true,
      });
    case "listContinueExpired":
      // Still listing (now in one piece): a pager detail, not a failure and not a relist.
      return {
        state,
        effects: [{ type: "report", event: { type: "listExpired", detail: input.detail } }],
      };
    case "watchListSynced":
      // The same stream goes on as an ordinary watch: its end or failure is a watch's.
      return {
        state: watching({ ...memory, resourceVersion: input.resourceVersion, goneInARow: 0 }),
        effects: NOTHING,
      };
    case "watchListEnded": {
      const m = observed(memory, input);
      if (input.synced) {
        return {
          state: watching({ ...m, resourceVersion: input.appliedResourceVersion, goneInARow: 0 }),
          effects: NOTHING,
        };
      }
      return failed(
        m,
        "list",
        new Error("the WatchList stream ended before the initial events were complete"),
        input,
      );
    }
    case "watchListFailed": {
      const m = observed(memory, input);
      if (input.appliedResourceVersion) {
        // Synced: the stream failed as the ordinary watch it had become; resumed as one.
        return watchFailure(m, input.appliedResourceVersion, input.error, input);
      }
      // An apiserver without WatchList answers 4xx (not 410): use a plain list from now on.
      const code = (input.error as { code?: number } | undefined)?.code;
      if (code !== undefined && code >= 400 && code < 500 && !isGone(input.error)) {
        return { state: listing({ ...m, watchList: false }, state.cause), effects: NOTHING };
      }
      return failed(m, "list", input.error, input);
    }
  }
  return undefined;
}

function fromWatching(
  state: Extract<ReflectorState, { phase: "watching" }>,
  input: ReflectorInput,
): Transition | undefined {
  if (input.type === "watchProgress") {
    // Progress: a later watch resumes from here, and a 410 after it relists at once again.
    if (!input.resourceVersion || input.resourceVersion === state.memory.resourceVersion) {
      return undefined;
    }
    return {
      state: watching({ ...state.memory, resourceVersion: input.resourceVersion, goneInARow: 0 }),
      effects: NOTHING,
    };
  }
  if (input.type !== "watchEnded" && input.type !== "watchFailed") return undefined;
  const m = observed(state.memory, input);
  if (input.type === "watchFailed") {
    return watchFailure(m, input.appliedResourceVersion, input.error, input);
  }
  const memory: ReflectorMemory = {
    ...m,
    resourceVersion: input.appliedResourceVersion || m.resourceVersion,
    goneInARow: input.events > 0 ? 0 : m.goneInARow,
  };
  const ended: ReflectorEffect = {
    type: "report",
    event: { type: "watchEnded", resourceVersion: memory.resourceVersion, events: input.events },
  };
  // A normal end (server timeout) resumes at once. A stream closed within a second without an
  // event is not a server timeout (an apiserver shutting down, a proxy closing streams): it backs
  // off, so it never turns into a tight reconnect loop.
  if (input.events === 0 && input.durationMs < VERY_SHORT_WATCH_MS) {
    const t = failed(
      memory,
      "watch",
      new Error(
        `very short watch: the stream ended within ${VERY_SHORT_WATCH_MS} ms without events`,
      ),
      input,
    );
    return { state: t.state, effects: [ended, ...t.effects] };
  }
  return { state: watching(memory), effects: [ended] };
}

/** What any watch tells: accepted, so the next needs no liveness bound. */
function observed(memory: ReflectorMemory, o: WatchOutcome): ReflectorMemory {
  return { ...memory, checkLiveness: memory.checkLiveness && !o.accepted };
}

/** What a failure's classification needs to know of the watch (a list: accepted, no bookmarks). */
type Seen = Pick<WatchOutcome, "accepted" | "bookmarks" | "healthy">;

/** A watch failed after applying events up to `applied`: resume from there, then classify. */
function watchFailure(
  memory: ReflectorMemory,
  applied: string,
  error: unknown,
  seen: Seen,
): Transition {
  const m = applied && applied !== memory.resourceVersion
    ? { ...memory, resourceVersion: applied, goneInARow: 0 } // the failed watch made progress
    : memory;
  return failed(m, "watch", error, seen);
}

/**
 * A list or watch failed with `error`: 410 relists (at once the first time in a row, after a
 * backoff the second), an idle or deliberately restarted watch resumes at once, anything else
 * backs off and then retries the same phase.
 */
function failed(
  memory: ReflectorMemory,
  phase: "list" | "watch",
  error: unknown,
  seen: Seen,
): Transition {
  const rv = memory.resourceVersion;
  const again = (m: ReflectorMemory): ReflectorState =>
    phase === "list" ? listing(m, "retry") : watching(m);
  if (isGone(error)) {
    const m = { ...memory, goneInARow: memory.goneInARow + 1 };
    const relist: ReflectorEffect = {
      type: "report",
      event: { type: "relist", reason: "gone", phase, resourceVersion: rv },
    };
    if (m.goneInARow === 1) return { state: listing(m, "gone"), effects: [relist] };
    return {
      state: { phase: "backoff", error: errorMessage(error), resume: "listing", memory: m },
      effects: [relist, { type: "backoff", phase, error }],
    };
  }
  if (error instanceof WatchIdleError) {
    // Silence is evidence of a dead connection when a bookmark was due on this stream, when the
    // watch was never accepted (no headers within the bound), or while other requests get no
    // answer either; otherwise it is a quiet stream, and reopening it is the liveness check.
    const missed = bookmarkWasDue(seen.bookmarks, error.idleMs);
    const quiet = !missed && seen.accepted && seen.healthy;
    const effects: ReflectorEffect[] = [];
    if (!quiet) effects.push({ type: "deaf", reason: idleReason(error.idleMs, missed, seen) });
    effects.push({
      type: "report",
      event: { type: "idle", resourceVersion: rv, idleMs: error.idleMs, quiet },
    });
    return { state: again({ ...memory, checkLiveness: quiet }), effects };
  }
  if (error instanceof WatchRestartError) {
    const effects: ReflectorEffect[] = [];
    if (error.why === "stalled") effects.push({ type: "deaf", reason: error.message });
    effects.push({
      type: "report",
      event: { type: "restart", why: error.why, resourceVersion: rv, detail: error.message },
    });
    return { state: again(memory), effects };
  }
  return {
    state: {
      phase: "backoff",
      error: errorMessage(error),
      resume: phase === "list" ? "listing" : "watching",
      memory,
    },
    effects: [{ type: "backoff", phase, error }],
  };
}

function idleReason(idleMs: number, missed: boolean, seen: { accepted: boolean }): string {
  const s = Math.round(idleMs / 1000);
  if (!seen.accepted) return `no answer to the watch for ${s} s`;
  if (missed) {
    return `no byte for ${s} s: missed the apiserver's bookmarks (this stream received them; ` +
      `one is due about every ${APISERVER_BOOKMARK_INTERVAL_MS / 1000} s)`;
  }
  return `no byte for ${s} s while the apiserver is not answering`;
}

/** The message of a thrown value, as the reflector's `lastError` reports it. */
export function errorMessage(err: unknown): string {
  return String((err as Error)?.message ?? err);
}
