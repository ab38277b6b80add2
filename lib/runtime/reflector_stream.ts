/**
 * How a reflector applies one watch stream's events to its {@link Store}: plain events straight
 * in, WatchList initial events (up to the `k8s.io/initial-events-end` bookmark) into one replace.
 *
 * @module
 */
import type { KubeObject } from "../kube/client.ts";
import type { ObjectWatchEvent } from "../kube/watch.ts";
import type { WatchOutcome } from "./reflector_machine.ts";
import type { ReplaceCounts, Replacement, Store } from "./store.ts";

/** One watch stream's bookkeeping while it runs. */
export interface Stream<T> {
  /** resourceVersion of the last event seen (or the one the watch started from). */
  rv: string;
  /** Events received. */
  events: number;
  /** WatchList: the replace the initial events go into, until the initial-events-end bookmark. */
  replacement?: Replacement<T>;
  /** WatchList: initial events of the current batch, not yet in the replace. */
  pending: T[];
  /** What step() is told about the stream. */
  seen: Omit<WatchOutcome, "healthy">;
}

/**
 * Applies one event of stream `s` to `store` and advances `s` (its resourceVersion, event count,
 * cadence bookmarks seen, last applied resourceVersion). While `s.replacement` is set (WatchList
 * initial events) ADDED and MODIFIED objects wait in `s.pending` (the caller adds them to the
 * replace once per batch); the `initial-events-end` bookmark finishes the replace and calls
 * `initialEventsEnd` with its counts and resourceVersion.
 * @throws Error for an event type it does not know
 */
export function applyWatchEvent<T extends KubeObject>(
  store: Store<T>,
  s: Stream<T>,
  ev: ObjectWatchEvent<T>,
  initialEventsEnd: (diff: ReplaceCounts, resourceVersion: string) => void,
): void {
  s.events++;
  const obj = ev.object;
  const newRv = obj.metadata?.resourceVersion;
  switch (ev.type) {
    case "ADDED":
    case "MODIFIED":
      if (s.replacement) s.pending.push(obj);
      else store.upsert(obj);
      break;
    case "DELETED":
      store.remove(obj);
      break;
    case "BOOKMARK":
      // The end of a WatchList's initial events is sent on demand, not on the cadence whose
      // silence would mean a dead stream (reflector_machine.ts, bookmarkWasDue).
      if (obj.metadata?.annotations?.["k8s.io/initial-events-end"] !== "true") {
        s.seen.bookmarks = true;
      } else if (s.replacement) {
        s.replacement.add(s.pending);
        s.pending = [];
        const diff = s.replacement.finish();
        s.replacement = undefined;
        initialEventsEnd(diff, newRv ?? s.rv);
      }
      break;
    default: {
      const never: never = ev;
      throw new Error(`unexpected watch event ${JSON.stringify(never)}`);
    }
  }
  if (newRv) {
    s.rv = newRv;
    if (!s.replacement) s.seen.appliedResourceVersion = newRv;
  }
}
