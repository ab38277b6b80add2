/**
 * applyWatchEvent (lib/runtime/reflector_stream.ts): which bookmarks count as the apiserver's
 * cadence. The `initial-events-end` bookmark of a WatchList is sent on demand, so it finishes the
 * replace but does not make the stream's later silence a missed bookmark; any other does.
 */
import { assertEquals } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import type { ObjectWatchEvent } from "../../lib/kube/watch.ts";
import { applyWatchEvent, type Stream } from "../../lib/runtime/reflector_stream.ts";
import { Store } from "../../lib/runtime/store.ts";

function stream(store: Store<KubeObject>, watchList: boolean): Stream<KubeObject> {
  return {
    rv: "",
    events: 0,
    replacement: watchList ? store.beginReplace() : undefined,
    pending: [],
    seen: { appliedResourceVersion: "", accepted: true, bookmarks: false },
  };
}

const obj = (name: string, rv: string): KubeObject => ({
  apiVersion: "v1",
  kind: "ConfigMap",
  metadata: { name, namespace: "ns", resourceVersion: rv },
});

const bookmark = (rv: string, initialEventsEnd = false): ObjectWatchEvent<KubeObject> => ({
  type: "BOOKMARK",
  object: {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: {
      resourceVersion: rv,
      annotations: initialEventsEnd ? { "k8s.io/initial-events-end": "true" } : undefined,
    },
  },
});

Deno.test("applyWatchEvent: the initial-events-end bookmark finishes the replace but is not a cadence bookmark; a later one is", () => {
  const store = new Store<KubeObject>();
  const s = stream(store, true);
  const ends: string[] = [];
  const apply = (ev: ObjectWatchEvent<KubeObject>) =>
    applyWatchEvent(store, s, ev, (_diff, rv) => ends.push(rv));
  apply({ type: "ADDED", object: obj("a", "5") });
  apply(bookmark("7", true));
  assertEquals(ends, ["7"]);
  assertEquals(s.replacement, undefined);
  assertEquals(store.size, 1);
  assertEquals(s.seen.bookmarks, false, "the initial-events-end bookmark counted");
  apply(bookmark("9"));
  assertEquals(s.seen.bookmarks, true);
  assertEquals(s.seen.appliedResourceVersion, "9");
});

Deno.test("applyWatchEvent: on a plain watch an annotated bookmark changes nothing; a plain one is a cadence bookmark", () => {
  const store = new Store<KubeObject>();
  const s = stream(store, false);
  applyWatchEvent(store, s, { type: "ADDED", object: obj("a", "11") }, () => {});
  assertEquals(s.seen.bookmarks, false, "an event is not a bookmark");
  applyWatchEvent(store, s, bookmark("12", true), () => {});
  assertEquals(s.seen.bookmarks, false);
  applyWatchEvent(store, s, bookmark("13"), () => {});
  assertEquals(s.seen.bookmarks, true);
});
