/**
 * The EventRecorder's aggregation, as client-go's tools/events does it (a scripted client, a fake
 * clock): one Event per key, the first repeat patched at once as `series.count: 2`, later repeats
 * coalesced to at most one write per interval, a finished series starting a new Event, an expired
 * Event created again, and no Event at all in a namespace being deleted (S21).
 */
import { assert, assertEquals } from "../assert.ts";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import { ApiError, FencedError } from "../../lib/kube/errors.ts";
import { FakeClock } from "../../lib/runtime/clock.ts";
import {
  clipUtf8,
  EVENT_SERIES_FINISH_MS,
  EVENT_SERIES_MIN_INTERVAL_MS,
  EventRecorder,
  EventWriteError,
  NOTE_MAX_BYTES,
} from "../../lib/runtime/events.ts";
import { TerminatingNamespaces } from "../../lib/runtime/namespaces.ts";

/** The apiserver's answer to a create in a namespace being deleted (captured from v1.36). */
const TERMINATING_STATUS = {
  kind: "Status" as const,
  apiVersion: "v1",
  status: "Failure" as const,
  message: 'events "x" is forbidden: unable to create new content in namespace ns because it ' +
    "is being terminated",
  reason: "Forbidden",
  details: {
    name: "x",
    group: "events.k8s.io",
    kind: "events",
    causes: [{
      reason: "NamespaceTerminating",
      message: "namespace ns is being terminated",
      field: "metadata.namespace",
    }],
  },
  code: 403,
};

type Ev = KubeObject & { series?: { count: number; lastObservedTime: string }; reason?: string };

/** A fake events API: records creates and patches; `fail` decides an error per call. */
function fakeApi(fail: (verb: string, name: string) => ApiError | undefined = () => undefined) {
  const calls: { verb: string; name: string; body: unknown }[] = [];
  const stored = new Map<string, Ev>();
  const client = {
    create(_r: unknown, body: Ev) {
      const name = body.metadata!.name!;
      calls.push({ verb: "create", name, body });
      const err = fail("create", name);
      if (err) return Promise.reject(err);
      stored.set(name, structuredClone(body));
      return Promise.resolve(body);
    },
    patch(_r: unknown, name: string, body: Partial<Ev>) {
      calls.push({ verb: "patch", name, body });
      const err = fail("patch", name);
      if (err) return Promise.reject(err);
      const cur = stored.get(name);
      if (!cur) return Promise.reject(new ApiError(404, { reason: "NotFound", code: 404 }));
      Object.assign(cur, body);
      return Promise.resolve(cur);
    },
  };
  return { client: client as unknown as KubeClient, calls, stored };
}

const as = {
  apiVersion: "apps.our-org.com/v1",
  kind: "AppService",
  metadata: { name: "web", namespace: "ns", uid: "as-uid" },
};
const pod = (n: number) => ({
  apiVersion: "v1",
  kind: "Pod",
  metadata: { name: `web-${n}`, namespace: "ns", uid: `pod-${n}` },
});
const stuck = (n: number, reason = "ImagePullBackOff") => ({
  type: "Warning" as const,
  reason,
  action: "WaitForPodReady",
  note: `web-${n}: back-off pulling image`,
  related: pod(n),
});

/** Lets queued writes (promises of the fake API) run. */
const settle = async () => {
  for (let i = 0; i < 20; i++) await Promise.resolve();
};

Deno.test("events: one Event per regarding+related+reason; count 2 at once, then one write per interval", async () => {
  const clock = new FakeClock();
  const api = fakeApi();
  const rec = new EventRecorder(api.client, "ctl", "me", { clock });
  rec.record(as, stuck(0));
  await rec.flush();
  assertEquals(api.calls.map((c) => c.verb), ["create"]);
  clock.advance(1_000);
  rec.record(as, stuck(0));
  await settle();
  assertEquals(api.calls.map((c) => c.verb), ["create", "patch"], "count 2 is written at once");
  const name = api.calls[0].name;
  assertEquals(api.stored.get(name)!.series?.count, 2);
  // Ten more repeats within a second: one write, when the interval allows.
  for (let i = 0; i < 10; i++) {
    clock.advance(100);
    rec.record(as, stuck(0));
  }
  await settle();
  assertEquals(api.calls.length, 2, "no write before the interval");
  clock.advance(EVENT_SERIES_MIN_INTERVAL_MS);
  await settle();
  assertEquals(api.calls.length, 3);
  assertEquals(api.calls[2].verb, "patch");
  assertEquals(api.stored.get(name)!.series?.count, 12);
  assertEquals(api.stored.size, 1, "one Event object");
  // Nothing pending: no more writes however long it waits.
  clock.advance(10 * EVENT_SERIES_MIN_INTERVAL_MS);
  await settle();
  assertEquals(api.calls.length, 3);
  // Another Pod, or another reason for the same Pod, is another Event.
  rec.record(as, stuck(1));
  rec.record(as, stuck(0, "ErrImagePull"));
  await rec.flush();
  assertEquals(api.stored.size, 3);
  assertEquals(rec.writes, { create: 3, patch: 2 });
});

Deno.test("events: a series with no repeat for 6 minutes is finished; the next occurrence is a new Event", async () => {
  const clock = new FakeClock();
  const api = fakeApi();
  const rec = new EventRecorder(api.client, "ctl", "me", { clock });
  rec.record(as, stuck(0));
  rec.record(as, stuck(0));
  await rec.flush();
  clock.advance(EVENT_SERIES_FINISH_MS);
  rec.record(as, stuck(0));
  await rec.flush();
  assertEquals(api.calls.map((c) => c.verb), ["create", "patch", "create"]);
  assertEquals(api.stored.size, 2);
  assert(api.calls[2].name !== api.calls[0].name, "a new name");
});

Deno.test("events: a repeat of an Event that expired creates it again with its count", async () => {
  const clock = new FakeClock();
  const api = fakeApi();
  const rec = new EventRecorder(api.client, "ctl", "me", { clock });
  rec.record(as, stuck(0));
  await rec.flush();
  api.stored.clear(); // the apiserver's event TTL
  clock.advance(1_000);
  rec.record(as, stuck(0));
  await rec.flush();
  assertEquals(api.calls.map((c) => c.verb), ["create", "patch", "create"]);
  const again = [...api.stored.values()][0];
  assertEquals(again.series?.count, 2);
});

Deno.test("events: flush writes a pending count at once (shutdown)", async () => {
  const clock = new FakeClock();
  const api = fakeApi();
  const rec = new EventRecorder(api.client, "ctl", "me", { clock });
  for (let i = 0; i < 3; i++) {
    rec.record(as, stuck(0));
    await settle();
  }
  assertEquals(api.calls.length, 2, "count 3 waits for the interval");
  await rec.flush();
  assertEquals(api.calls.length, 3);
  assertEquals([...api.stored.values()][0].series?.count, 3);
});

Deno.test("events: nothing is created in a namespace being deleted after the first refusal (S21)", async () => {
  const clock = new FakeClock();
  const api = fakeApi(() => new ApiError(403, TERMINATING_STATUS));
  const errors: unknown[] = [];
  const gate = new TerminatingNamespaces();
  const rec = new EventRecorder(api.client, "ctl", "me", {
    clock,
    terminating: gate,
    onError: (e) => errors.push(e),
  });
  rec.record(as, stuck(0));
  await rec.flush();
  assertEquals(api.calls.length, 1);
  assert(gate.has("ns", "as-uid"));
  for (let i = 0; i < 5; i++) rec.record(as, stuck(i, `R${i}`));
  await rec.flush();
  assertEquals(api.calls.length, 1, "no create after the refusal");
  assertEquals(errors, [], "a namespace refusal is not an error");
  assertEquals(rec.suppressed, 6);
  // Another object in another namespace is not held back.
  rec.record({ ...as, metadata: { ...as.metadata, namespace: "other", uid: "u2" } }, stuck(0));
  await rec.flush();
  assertEquals(api.calls.length, 2);
});

Deno.test("events: any other refusal is reported once and not retried", async () => {
  const clock = new FakeClock();
  const api = fakeApi(() => new ApiError(422, { reason: "Invalid", code: 422 }));
  const errors: unknown[] = [];
  const rec = new EventRecorder(api.client, "ctl", "me", { clock, onError: (e) => errors.push(e) });
  rec.record(as, stuck(0));
  await rec.flush();
  clock.advance(60_000);
  await rec.flush();
  assertEquals(api.calls.length, 1);
  assertEquals(errors.length, 1);
  assertEquals(rec.seriesCount, 0);
});

Deno.test("events: a repeat with another note finishes the series and starts a new Event with it (S24)", async () => {
  const clock = new FakeClock();
  const api = fakeApi();
  const rec = new EventRecorder(api.client, "ctl", "me", { clock });
  const crash = (backOff: string) => ({
    type: "Warning" as const,
    reason: "CrashLoopBackOff",
    action: "WaitForPodReady",
    note: `web-0: back-off ${backOff} restarting failed container=app`,
    related: pod(0),
  });
  rec.record(as, crash("10s"));
  clock.advance(1_000);
  rec.record(as, crash("10s"));
  await rec.flush();
  // Within the interval since the Event began: a new text counts in the series.
  clock.advance(1_000);
  rec.record(as, crash("20s"));
  await rec.flush();
  assertEquals(api.stored.size, 1, "a note changing faster than the interval makes no new Event");
  // After it: the series' last count is written and a new Event says the new text.
  clock.advance(EVENT_SERIES_MIN_INTERVAL_MS);
  rec.record(as, crash("40s"));
  await rec.flush();
  const evs = [...api.stored.values()] as (Ev & { note?: string })[];
  assertEquals(evs.length, 2);
  assertEquals(evs[0].series?.count, 3, "the first series' last count");
  assert(evs[1].note?.includes("back-off 40s"), evs[1].note);
  // Its repeats count in the new series.
  clock.advance(1_000);
  rec.record(as, crash("40s"));
  await rec.flush();
  assertEquals(evs.length, 2);
  assertEquals((api.stored.get(evs[1].metadata!.name!) as Ev).series?.count, 2);
});

Deno.test("events: a failed write says whether it may have reached the apiserver", async () => {
  const path = "POST /apis/events.k8s.io/v1/namespaces/ns/events";
  const inFlight = new FencedError(
    "NotHeld",
    "write in flight when leadership ended",
    undefined,
    undefined,
    true,
  );
  const refused = new FencedError("NotHeld", path);
  const byServer = new FencedError(
    "NotLeaseHolder",
    path,
    undefined,
    new ApiError(403, { reason: "Forbidden", code: 403, message: "not the Lease holder" }),
  );
  for (
    const [err, sent, says] of [
      [inFlight, "maybe", "aborted; may have reached the apiserver"],
      [refused, "no", "not sent"],
      [byServer, "yes", "refused by the apiserver: not the Lease holder"],
      [new ApiError(422, { reason: "Invalid", code: 422, message: "bad" }), "yes", "bad"],
    ] as const
  ) {
    const clock = new FakeClock();
    const api = fakeApi(() => err as ApiError);
    const errors: unknown[] = [];
    const rec = new EventRecorder(api.client, "ctl", "me", {
      clock,
      onError: (e) => errors.push(e),
    });
    rec.record(as, stuck(0));
    await rec.flush();
    assertEquals(errors.length, 1);
    const e = errors[0] as EventWriteError;
    assert(e instanceof EventWriteError, String(e));
    assertEquals(e.sent, sent);
    assertEquals(e.cause, err);
    assert(e.message.includes(says), e.message);
    assert(e.message.startsWith("Event ImagePullBackOff about AppService/web: "), e.message);
    if (sent !== "no") assert(!e.message.includes("not sent"), e.message);
  }
});

const utf8Bytes = (s: string) => new TextEncoder().encode(s).length;

Deno.test("events: a note is cut to the API's limit in bytes of UTF-8, not in characters", async () => {
  const api = fakeApi();
  const rec = new EventRecorder(api.client, "ctl", "me");
  // 400 Japanese characters: 400 UTF-16 units, 1,200 bytes (the apiserver counts bytes).
  const japanese = "拒否されました。".repeat(50);
  assertEquals(japanese.length, 400);
  rec.record(as, {
    type: "Warning",
    reason: "PodCreateRejected",
    action: "Create",
    note: japanese,
  });
  // 1,100 ASCII characters: cut as before, by the same rule.
  rec.record(as, { type: "Warning", reason: "Long", action: "Create", note: "x".repeat(1_100) });
  rec.record(as, { type: "Normal", reason: "Short", action: "Create", note: "fits" });
  await rec.flush();
  const notes = api.calls.map((c) => (c.body as { note: string }).note);
  assertEquals(notes.length, 3);
  for (const n of notes) assert(utf8Bytes(n) <= NOTE_MAX_BYTES, `${utf8Bytes(n)} bytes`);
  assert(notes[0].startsWith("拒否されました。") && notes[0].endsWith("…"), notes[0].slice(-5));
  assert(utf8Bytes(notes[0]) > NOTE_MAX_BYTES - 4, "cut at the limit, not far before it");
  assertEquals(notes[1], "x".repeat(NOTE_MAX_BYTES - 3) + "…");
  assertEquals(notes[2], "fits");
});

Deno.test("clipUtf8: never over the limit, never splits a character, unchanged when it fits", () => {
  const samples = [
    "",
    "abc",
    "é".repeat(600),
    "😀".repeat(300),
    "a😀".repeat(300),
    "\ud83d".repeat(500),
  ];
  for (const s of samples) {
    for (const max of [3, 4, 5, 100, 1024]) {
      const c = clipUtf8(s, max);
      assert(utf8Bytes(c) <= max, `${JSON.stringify(s.slice(0, 4))} ${max}: ${utf8Bytes(c)} bytes`);
      if (utf8Bytes(s) <= max) assertEquals(c, s);
      else {
        assert(c.endsWith("…"));
        const kept = c.slice(0, -1);
        assert(s.startsWith(kept), "a prefix of the text");
        // No character split: the kept part does not end in a high surrogate of a pair.
        const last = kept.charCodeAt(kept.length - 1);
        assert(
          !(last >= 0xd800 && last <= 0xdbff && s.charCodeAt(kept.length) >= 0xdc00),
          "split pair",
        );
      }
    }
  }
});
