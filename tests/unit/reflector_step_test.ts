/**
 * The reflector's transition function, step() (lib/runtime/reflector_machine.ts): every row of the
 * table in docs/design/reflector.md, as a pure function of (state, input).
 */
import { assert, assertEquals } from "../assert.ts";
import { ApiError } from "../../lib/kube/errors.ts";
import { WatchIdleError, WatchRestartError } from "../../lib/kube/watch.ts";
import {
  APISERVER_BOOKMARK_INTERVAL_MS,
  BOOKMARK_SLACK_MS,
  bookmarkWasDue,
  type ReflectorEffect,
  type ReflectorInput,
  type ReflectorMemory,
  type ReflectorState,
  step,
  VERY_SHORT_WATCH_MS,
  type WatchOutcome,
} from "../../lib/runtime/reflector_machine.ts";

const memory = (m: Partial<ReflectorMemory> = {}): ReflectorMemory => ({
  resourceVersion: "10",
  goneInARow: 0,
  watchList: false,
  listFromCache: false,
  checkLiveness: false,
  ...m,
});
const listingState = (m: Partial<ReflectorMemory> = {}): ReflectorState => ({
  phase: "listing",
  via: m.watchList ? "watchList" : "list",
  fromCache: false,
  cause: "start",
  memory: memory(m),
});
const watchingState = (m: Partial<ReflectorMemory> = {}): ReflectorState => ({
  phase: "watching",
  memory: memory(m),
});
/** A watch that was accepted, applied nothing new and saw no bookmark, on a healthy path. */
const outcome = (o: Partial<WatchOutcome> = {}): WatchOutcome => ({
  appliedResourceVersion: "10",
  accepted: true,
  bookmarks: false,
  healthy: true,
  ...o,
});
const gone = () => new ApiError(410);
const serverError = () => new ApiError(500);
const types = (effects: ReflectorEffect[]) =>
  effects.map((e) => e.type === "report" ? `report:${e.event.type}` : e.type);
/** The state's memory (fails the test for idle and stopped). */
function mem(s: ReflectorState): ReflectorMemory {
  assert("memory" in s, `no memory in ${s.phase}`);
  return s.memory;
}

Deno.test("step: start lists (consistent), or from the watch cache, or by WatchList", () => {
  const start = (useWatchList: boolean, initialListFromCache: boolean) =>
    step({ phase: "idle" }, { type: "start", useWatchList, initialListFromCache });
  const plain = start(false, false).state;
  assertEquals(plain.phase === "listing" && [plain.via, plain.fromCache, plain.cause], [
    "list",
    false,
    "start",
  ]);
  const cached = start(false, true).state;
  assertEquals(cached.phase === "listing" && cached.fromCache, true);
  const wl = start(true, false).state;
  assertEquals(wl.phase === "listing" && wl.via, "watchList");
  assertEquals(start(false, false).effects, []);
});

Deno.test("step: a list applied watches from its resourceVersion; later lists are consistent", () => {
  const t = step(listingState({ listFromCache: true, goneInARow: 1 }), {
    type: "listed",
    resourceVersion: "42",
  });
  assertEquals(t.state.phase, "watching");
  assertEquals(mem(t.state).resourceVersion, "42");
  assertEquals(mem(t.state).listFromCache, false);
  // A list is no progress past a 410: only a watch that brings events is.
  assertEquals(mem(t.state).goneInARow, 1);
  assertEquals(t.effects, []);
});

Deno.test("step: a paged list whose continue token expired goes on listing (in one piece), reported", () => {
  const s = listingState();
  const t = step(s, { type: "listContinueExpired", detail: "continue expired" });
  assertEquals(t.state, s);
  assertEquals(t.effects, [{
    type: "report",
    event: { type: "listExpired", detail: "continue expired" },
  }]);
});

Deno.test("step: 410 Gone on a watch relists at once; a second 410 in a row backs off first", () => {
  const t1 = step(watchingState(), { type: "watchFailed", error: gone(), ...outcome() });
  assertEquals(t1.state.phase === "listing" && [t1.state.cause, t1.state.via], ["gone", "list"]);
  assertEquals(t1.effects, [{
    type: "report",
    event: { type: "relist", reason: "gone", phase: "watch", resourceVersion: "10" },
  }]);
  const listed = step(t1.state, { type: "listed", resourceVersion: "20" }).state;
  // The new watch is answered 410 again before any event: no progress, so back off.
  const t2 = step(listed, {
    type: "watchFailed",
    error: gone(),
    ...outcome({ appliedResourceVersion: "20" }),
  });
  assertEquals(t2.state.phase === "backoff" && t2.state.resume, "listing");
  assertEquals(types(t2.effects), ["report:relist", "backoff"]);
  assertEquals(mem(t2.state).goneInARow, 2);
  const after = step(t2.state, { type: "backoffDone" }).state;
  assertEquals(after.phase === "listing" && after.cause, "retry");
});

Deno.test("step: a 410 after a watch that made progress relists at once again", () => {
  const s = watchingState({ goneInARow: 1, resourceVersion: "20" });
  const t = step(s, {
    type: "watchFailed",
    error: gone(),
    ...outcome({ appliedResourceVersion: "25" }),
  });
  assertEquals(t.state.phase === "listing" && t.state.cause, "gone");
  assertEquals(mem(t.state).goneInARow, 1);
  assertEquals(mem(t.state).resourceVersion, "25");
});

Deno.test("step: 410 Gone on a list lists again at once, then backs off", () => {
  const t1 = step(listingState(), { type: "listFailed", error: gone() });
  assertEquals(t1.state.phase === "listing" && t1.state.cause, "gone");
  assertEquals(t1.effects, [{
    type: "report",
    event: { type: "relist", reason: "gone", phase: "list", resourceVersion: "10" },
  }]);
  const t2 = step(t1.state, { type: "listFailed", error: gone() });
  assertEquals(t2.state.phase === "backoff" && t2.state.resume, "listing");
  assertEquals(t2.effects[1], {
    type: "backoff",
    phase: "list",
    error: (t2.effects[1] as { error: unknown }).error,
  });
});

Deno.test("step: other failures back off, then retry the same phase", () => {
  const l = step(listingState(), { type: "listFailed", error: serverError() });
  assertEquals(l.state.phase === "backoff" && [l.state.resume, l.state.error], [
    "listing",
    serverError().message,
  ]);
  assertEquals(types(l.effects), ["backoff"]);
  const w = step(watchingState(), { type: "watchFailed", error: serverError(), ...outcome() });
  assertEquals(w.state.phase === "backoff" && w.state.resume, "watching");
  assertEquals(
    w.effects.length === 1 && w.effects[0].type === "backoff" && w.effects[0].phase,
    "watch",
  );
  const back = step(w.state, { type: "backoffDone" }).state;
  assertEquals(back.phase, "watching");
  assertEquals(mem(back).resourceVersion, "10");
});

Deno.test("step: watch progress moves the resourceVersion and ends a run of 410s", () => {
  const t = step(watchingState({ goneInARow: 1 }), {
    type: "watchProgress",
    resourceVersion: "11",
  });
  assertEquals([t.state.phase, mem(t.state).resourceVersion, mem(t.state).goneInARow], [
    "watching",
    "11",
    0,
  ]);
  assertEquals(t.effects, []);
  const same = watchingState({ goneInARow: 1 });
  assertEquals(step(same, { type: "watchProgress", resourceVersion: "10" }).state, same);
});

Deno.test("step: a failed watch resumes from the last event it applied", () => {
  const t = step(watchingState({ goneInARow: 1 }), {
    type: "watchFailed",
    error: serverError(),
    ...outcome({ appliedResourceVersion: "17" }),
  });
  assertEquals(mem(t.state).resourceVersion, "17");
  assertEquals(mem(t.state).goneInARow, 0, "progress resets the 410 count");
});

Deno.test("step: a watch ending normally resumes at once; a very short empty one backs off", () => {
  const ok = step(watchingState({ goneInARow: 1 }), {
    type: "watchEnded",
    events: 3,
    durationMs: 300_000,
    ...outcome({ appliedResourceVersion: "13" }),
  });
  assertEquals(ok.state.phase, "watching");
  assertEquals(mem(ok.state).resourceVersion, "13");
  assertEquals(mem(ok.state).goneInARow, 0);
  assertEquals(ok.effects, [{
    type: "report",
    event: { type: "watchEnded", resourceVersion: "13", events: 3 },
  }]);
  const quietLong = step(watchingState(), {
    type: "watchEnded",
    events: 0,
    durationMs: VERY_SHORT_WATCH_MS,
    ...outcome(),
  });
  assertEquals(quietLong.state.phase, "watching");
  const short = step(watchingState(), {
    type: "watchEnded",
    events: 0,
    durationMs: VERY_SHORT_WATCH_MS - 1,
    ...outcome(),
  });
  assertEquals(short.state.phase === "backoff" && short.state.resume, "watching");
  assertEquals(types(short.effects), ["report:watchEnded", "backoff"]);
});

Deno.test("step: idle on a stream that received a bookmark is a deaf watch, reopened at once", () => {
  const idle = step(watchingState(), {
    type: "watchFailed",
    error: new WatchIdleError(75_000),
    ...outcome({ bookmarks: true }),
  });
  assertEquals(idle.state.phase, "watching");
  assertEquals(mem(idle.state).checkLiveness, false);
  assertEquals(types(idle.effects), ["deaf", "report:idle"]);
  const deaf = idle.effects[0];
  assert(deaf.type === "deaf" && /missed the apiserver's bookmarks/.test(deaf.reason));
  assertEquals(idle.effects[1], {
    type: "report",
    event: { type: "idle", resourceVersion: "10", idleMs: 75_000, quiet: false },
  });
});

Deno.test("step: a bookmark on an earlier stream owes none to the next; a bound shorter than the cadence never counts a missed one", () => {
  // The stream before received bookmarks and ended at its timeout; the next one, reopened from
  // the last bookmark's resourceVersion, gets none until the apiserver's cache moves past it.
  const ended = step(watchingState(), {
    type: "watchEnded",
    events: 2,
    durationMs: 300_000,
    ...outcome({ bookmarks: true, appliedResourceVersion: "12" }),
  });
  const reopened = step(ended.state, {
    type: "watchFailed",
    error: new WatchIdleError(75_000),
    ...outcome({ appliedResourceVersion: "12" }),
  });
  assertEquals(types(reopened.effects), ["report:idle"]);
  assertEquals(mem(reopened.state).checkLiveness, true, "the reopening is the liveness check");
  // A bound shorter than the cadence: silence after a bookmark is not a missed one.
  const short = step(watchingState(), {
    type: "watchFailed",
    error: new WatchIdleError(30_000),
    ...outcome({ bookmarks: true }),
  });
  assertEquals(types(short.effects), ["report:idle"]);
});

Deno.test("bookmarkWasDue: only after a bookmark on the stream, and only past the interval and its slack", () => {
  const due = APISERVER_BOOKMARK_INTERVAL_MS + BOOKMARK_SLACK_MS;
  assertEquals(bookmarkWasDue(true, due + 1), true);
  assertEquals(bookmarkWasDue(true, due), false);
  assertEquals(bookmarkWasDue(false, 10 * due), false);
  assertEquals(bookmarkWasDue(true, 75_000), true, "the default idle bound detects a missed one");
});

Deno.test("step: idle without bookmarks on a healthy path is quiet: no deaf, the reopening is bounded", () => {
  const q = step(watchingState(), {
    type: "watchFailed",
    error: new WatchIdleError(75_000),
    ...outcome(),
  });
  assertEquals(q.state.phase, "watching");
  assertEquals(mem(q.state).checkLiveness, true);
  assertEquals(types(q.effects), ["report:idle"]);
  // The reopening is accepted: the bound is lifted for the watch after it.
  const next = step(q.state, {
    type: "watchEnded",
    events: 2,
    durationMs: 300_000,
    ...outcome(),
  });
  assertEquals(mem(next.state).checkLiveness, false);
  // The reopening never answers: that is a dead path, not quiet.
  const dead = step(q.state, {
    type: "watchFailed",
    error: new WatchIdleError(10_000),
    ...outcome({ accepted: false }),
  });
  assert(dead.effects[0].type === "deaf" && /no answer to the watch/.test(dead.effects[0].reason));
  const unhealthy = step(watchingState(), {
    type: "watchFailed",
    error: new WatchIdleError(75_000),
    ...outcome({ healthy: false }),
  });
  assert(
    unhealthy.effects[0].type === "deaf" &&
      /while the apiserver is not answering/.test(unhealthy.effects[0].reason),
  );
});

Deno.test("step: a watch restarted by the client resumes at once; stalled marks it deaf", () => {
  const stalled = step(watchingState(), {
    type: "watchFailed",
    error: new WatchRestartError("stalled", "nothing since the outage"),
    ...outcome(),
  });
  assertEquals(stalled.state.phase, "watching");
  assertEquals(types(stalled.effects), ["deaf", "report:restart"]);
  const creds = step(watchingState(), {
    type: "watchFailed",
    error: new WatchRestartError("credentials", "CA changed"),
    ...outcome(),
  });
  assertEquals(types(creds.effects), ["report:restart"]);
});

Deno.test("step: WatchList syncs, falls back to lists on 4xx, syncs again on 410 or an early end", () => {
  const s = listingState({ watchList: true, goneInARow: 1 });
  const synced = step(s, {
    type: "watchListEnded",
    synced: true,
    ...outcome({ appliedResourceVersion: "30" }),
  });
  assertEquals(synced.state.phase, "watching");
  assertEquals([mem(synced.state).resourceVersion, mem(synced.state).goneInARow], ["30", 0]);
  // Synced on the way: the same stream goes on as a watch.
  const onTheWay = step(s, { type: "watchListSynced", resourceVersion: "31" });
  assertEquals(onTheWay.state.phase, "watching");
  assertEquals([mem(onTheWay.state).resourceVersion, mem(onTheWay.state).goneInARow], ["31", 0]);
  const early = step(s, { type: "watchListEnded", synced: false, ...outcome() });
  assertEquals(early.state.phase === "backoff" && early.state.resume, "listing");
  const refused = step(s, {
    type: "watchListFailed",
    error: new ApiError(400),
    ...outcome({ appliedResourceVersion: "" }),
  });
  assertEquals(refused.state.phase === "listing" && refused.state.via, "list");
  assertEquals(mem(refused.state).watchList, false);
  assertEquals(refused.effects, []);
  const g = step(listingState({ watchList: true }), {
    type: "watchListFailed",
    error: gone(),
    ...outcome({ appliedResourceVersion: "" }),
  });
  assertEquals(types(g.effects), ["report:relist"]);
  assertEquals(g.state.phase === "listing" && g.state.via, "watchList");
  // Synced, then the stream failed as the ordinary watch it had become: resumed as a watch.
  const after = step(s, {
    type: "watchListFailed",
    error: serverError(),
    ...outcome({ appliedResourceVersion: "35" }),
  });
  assertEquals(after.state.phase === "backoff" && after.state.resume, "watching");
  assertEquals(mem(after.state).resourceVersion, "35");
  assertEquals(after.effects[0].type === "backoff" && after.effects[0].phase, "watch");
});

Deno.test("step: stop ends every state; inputs that do not apply change nothing", () => {
  const states: ReflectorState[] = [
    { phase: "idle" },
    listingState(),
    watchingState(),
    { phase: "backoff", error: "x", resume: "watching", memory: memory() },
    { phase: "stopped" },
  ];
  for (const s of states) assertEquals(step(s, { type: "stop" }).state, { phase: "stopped" });
  const stray: [ReflectorState, ReflectorInput][] = [
    [watchingState(), { type: "listed", resourceVersion: "1" }],
    [listingState(), { type: "backoffDone" }],
    [{ phase: "stopped" }, { type: "start", useWatchList: false, initialListFromCache: false }],
    [{ phase: "idle" }, { type: "backoffDone" }],
  ];
  for (const [s, i] of stray) assertEquals(step(s, i), { state: s, effects: [] });
});
