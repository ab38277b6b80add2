/**
 * Discovery (lib/kube/discovery.ts) with an injected fetcher and clock, no apiserver: how a
 * reference and a discovery document are read, what is cached per group/version, the refresh rule
 * (a read when a group/version is first needed, once more on a missing kind, once more after an
 * invalidation, never two within the interval, one read shared by concurrent callers, an
 * invalidation during a read outliving it), the typed error of a kind not served, and
 * DynamicClient's single retry on a type gone stale. What the apiserver really answers is checked
 * in tests/e2e/discovery_test.ts.
 */
import { assert, assertEquals, assertRejects } from "../assert.ts";
import {
  apiVersionOf,
  Discovery,
  DISCOVERY_MIN_REFRESH_INTERVAL_MS,
  discoveryPath,
  DynamicClient,
  groupVersionKind,
  isNoKindMatch,
  isResourceNotServed,
  NoKindMatchError,
  parseResourceList,
  ScopeChangedError,
} from "../../lib/kube/discovery.ts";
import type { KubeClient } from "../../lib/kube/client.ts";
import { ApiError } from "../../lib/kube/errors.ts";
import type { ResourceType } from "../../lib/kube/resources.ts";

/** An APIResourceList of `groupVersion` with `[name, kind, namespaced]` resources. */
function doc(groupVersion: string, resources: [string, string, boolean][]): unknown {
  return {
    kind: "APIResourceList",
    apiVersion: "v1",
    groupVersion,
    resources: resources.map(([name, kind, namespaced]) => ({
      name,
      singularName: "",
      namespaced,
      kind,
      verbs: ["get", "list"],
    })),
  };
}

const notFound = () =>
  new ApiError(404, {
    kind: "Status",
    status: "Failure",
    reason: "NotFound",
    message: "the server could not find the requested resource",
    details: {},
    code: 404,
  });

/** A fetcher serving `docs` by path (absent: 404), a clock, and the paths read. */
function fake(docs: Record<string, unknown>) {
  const reads: string[] = [];
  let nowMs = 0;
  const clock = { now: () => nowMs, advance: (ms: number) => void (nowMs += ms) };
  const fetcher = (path: string) => {
    reads.push(path);
    const d = docs[path];
    return d === undefined ? Promise.reject(notFound()) : Promise.resolve(structuredClone(d));
  };
  return { docs, reads, clock, discovery: new Discovery(fetcher, { now: clock.now }) };
}

/** The type of `kind` in g.example.com/v1. */
const gType = (kind: string, plural: string, namespaced: boolean): ResourceType => ({
  apiVersion: "g.example.com/v1",
  kind,
  plural,
  namespaced,
});

const CORE = doc("v1", [
  ["pods", "Pod", true],
  ["pods/status", "Pod", true],
  ["pods/binding", "Binding", true],
  ["namespaces", "Namespace", false],
]);
const APPS = doc("apps/v1", [["deployments", "Deployment", true]]);

Deno.test("discovery: references, paths and documents are read as the API conventions say", () => {
  assertEquals(groupVersionKind({ apiVersion: "v1", kind: "Pod" }), {
    group: "",
    version: "v1",
    kind: "Pod",
  });
  assertEquals(groupVersionKind({ apiVersion: "apps/v1", kind: "Deployment" }), {
    group: "apps",
    version: "v1",
    kind: "Deployment",
  });
  const rt: ResourceType = {
    apiVersion: "x.example.com/v2",
    kind: "W",
    plural: "ws",
    namespaced: true,
  };
  assertEquals(groupVersionKind(rt), { group: "x.example.com", version: "v2", kind: "W" });
  for (
    const bad of [
      { apiVersion: "a/b/c", kind: "K" },
      { apiVersion: "/v1", kind: "K" },
      { apiVersion: "", kind: "K" },
      { apiVersion: "v1", kind: "" },
      { group: "a b", version: "v1", kind: "K" },
      { group: "a", version: "v1?x", kind: "K" },
    ]
  ) {
    let thrown: unknown;
    try {
      groupVersionKind(bad);
    } catch (err) {
      thrown = err;
    }
    assert(thrown instanceof TypeError, `${JSON.stringify(bad)}: ${thrown}`);
  }
  assertEquals(apiVersionOf({ group: "", version: "v1" }), "v1");
  assertEquals(discoveryPath({ group: "", version: "v1" }), "/api/v1");
  assertEquals(discoveryPath({ group: "apps", version: "v1" }), "/apis/apps/v1");

  const kinds = parseResourceList(CORE, { group: "", version: "v1" });
  // subresources left out; Binding is only a subresource here
  assertEquals([...kinds.keys()], ["Pod", "Namespace"]);
  assertEquals(kinds.get("Namespace"), {
    apiVersion: "v1",
    kind: "Namespace",
    plural: "namespaces",
    namespaced: false,
  });
  const twice = parseResourceList(
    doc("g/v1", [["firsts", "K", true], ["seconds", "K", false]]),
    { group: "g", version: "v1" },
  );
  assertEquals(twice.get("K")?.plural, "firsts");
  let wrong: unknown;
  try {
    parseResourceList(APPS, { group: "batch", version: "v1" });
  } catch (err) {
    wrong = err;
  }
  assert(wrong instanceof TypeError && /apps\/v1/.test(wrong.message), String(wrong));
  let notList: unknown;
  try {
    parseResourceList({ kind: "Status" }, { group: "", version: "v1" });
  } catch (err) {
    notList = err;
  }
  assert(notList instanceof TypeError, String(notList));
});

Deno.test("discovery: a group/version is read when first needed, then served from the cache", async () => {
  const f = fake({ "/api/v1": CORE, "/apis/apps/v1": APPS });
  assertEquals(await f.discovery.resolve({ apiVersion: "v1", kind: "Pod" }), {
    apiVersion: "v1",
    kind: "Pod",
    plural: "pods",
    namespaced: true,
  });
  assertEquals(
    (await f.discovery.resolve({ group: "", version: "v1", kind: "Namespace" })).namespaced,
    false,
  );
  const dep = await f.discovery.resolve({ apiVersion: "apps/v1", kind: "Deployment" });
  assertEquals(dep.plural, "deployments");
  dep.plural = "changed by the caller"; // a copy: the cache is not the caller's
  assertEquals(
    (await f.discovery.resolve({ apiVersion: "apps/v1", kind: "Deployment" })).plural,
    "deployments",
  );
  f.clock.advance(3_600_000); // age alone never causes a read
  await f.discovery.resolve({ apiVersion: "v1", kind: "Pod" });
  assertEquals(f.reads, ["/api/v1", "/apis/apps/v1"]);
  assertEquals(f.discovery.reads, 2);
});

Deno.test("discovery: a missing kind reads its group/version once more, at most once per interval", async () => {
  const f = fake({
    "/apis/g.example.com/v1": doc("g.example.com/v1", [["alphas", "Alpha", true]]),
  });
  const beta = { group: "g.example.com", version: "v1", kind: "Beta" };
  await f.discovery.resolve({ ...beta, kind: "Alpha" });

  // A CRD of kind Beta appears; asked within the interval: no read, the typed error.
  f.docs["/apis/g.example.com/v1"] = doc("g.example.com/v1", [
    ["alphas", "Alpha", true],
    ["betas", "Beta", false],
  ]);
  f.clock.advance(DISCOVERY_MIN_REFRESH_INTERVAL_MS - 1);
  const early = await assertRejects(() => f.discovery.resolve(beta));
  assert(early instanceof NoKindMatchError && early.groupVersionServed, String(early));
  assertEquals(f.reads.length, 1);

  // Past the interval: one read, and the kind is found.
  f.clock.advance(1);
  assertEquals(await f.discovery.resolve(beta), gType("Beta", "betas", false));
  assertEquals(f.reads.length, 2);
  await f.discovery.resolve(beta);
  assertEquals(f.reads.length, 2);
});

Deno.test("discovery: a kind never served gives NoKindMatchError naming it, and no refresh storm", async () => {
  const f = fake({ "/apis/apps/v1": APPS });
  const missing = { group: "apps", version: "v1", kind: "Deploymnt" };
  const err = await assertRejects(() => f.discovery.resolve(missing));
  assert(isNoKindMatch(err), String(err));
  assertEquals([err.group, err.version, err.kind, err.groupVersionServed], [
    "apps",
    "v1",
    "Deploymnt",
    true,
  ]);
  assert(/Deploymnt/.test(err.message) && /apps\/v1/.test(err.message), err.message);

  // A group/version the server does not serve (404 on its document): the other case.
  const nogroup = { apiVersion: "nothing.example.com/v1", kind: "Widget" };
  const err2 = await assertRejects(() => f.discovery.resolve(nogroup));
  assert(isNoKindMatch(err2) && !err2.groupVersionServed, String(err2));
  assert(/does not serve nothing\.example\.com\/v1/.test(err2.message), err2.message);

  // 100 concurrent and 1,000 sequential misses at one instant: no further read.
  const before = f.reads.length;
  const results = await Promise.allSettled(
    Array.from({ length: 100 }, () => f.discovery.resolve(missing)),
  );
  assert(results.every((r) => r.status === "rejected" && isNoKindMatch(r.reason)));
  for (let i = 0; i < 1_000; i++) await f.discovery.resolve(missing).catch(() => {});
  assertEquals(f.reads.length, before);

  // Misses every 100 ms for 10 s: one read per interval per group/version, no more.
  for (let i = 0; i < 100; i++) {
    f.clock.advance(100);
    await f.discovery.resolve(missing).catch(() => {});
    await f.discovery.resolve(nogroup).catch(() => {});
  }
  const reads = f.reads.slice(before);
  const perGv = (p: string) => reads.filter((r) => r === p).length;
  assertEquals(perGv("/apis/apps/v1"), 10_000 / DISCOVERY_MIN_REFRESH_INTERVAL_MS);
  assertEquals(perGv("/apis/nothing.example.com/v1"), 10_000 / DISCOVERY_MIN_REFRESH_INTERVAL_MS);

  // The group/version appears later (a CRD installed): found at the next read allowed.
  f.docs["/apis/nothing.example.com/v1"] = doc("nothing.example.com/v1", [[
    "widgets",
    "Widget",
    true,
  ]]);
  f.clock.advance(DISCOVERY_MIN_REFRESH_INTERVAL_MS);
  assertEquals((await f.discovery.resolve(nogroup)).plural, "widgets");
});

Deno.test("discovery: concurrent callers share one read; an aborted caller stops waiting, others get it", async () => {
  let release!: (d: unknown) => void;
  let reads = 0;
  const discovery = new Discovery(() => {
    reads++;
    return new Promise((r) => release = r);
  });
  const ref = { apiVersion: "apps/v1", kind: "Deployment" };
  const ac = new AbortController();
  const a = discovery.resolve(ref, ac.signal);
  const b = discovery.resolve(ref);
  const c = discovery.resolve(ref);
  ac.abort(new Error("caller gave up"));
  const aborted = await assertRejects(() => a, /caller gave up/);
  assert(!isNoKindMatch(aborted));
  release(APPS);
  assertEquals((await b).plural, "deployments");
  assertEquals((await c).plural, "deployments");
  assertEquals(reads, 1);
});

Deno.test("discovery: an invalidation during a read is not cleared by that read", async () => {
  let release!: (d: unknown) => void;
  let nowMs = 0;
  const paths: string[] = [];
  const discovery = new Discovery((path) => {
    paths.push(path);
    return new Promise((r) => release = r);
  }, { now: () => nowMs });
  const ref = { apiVersion: "apps/v1", kind: "Deployment" };
  const first = discovery.resolve(ref);
  discovery.invalidate(ref); // e.g. a 404 seen while the document was on its way
  release(APPS);
  await first;
  nowMs += DISCOVERY_MIN_REFRESH_INTERVAL_MS;
  const second = discovery.resolve(ref);
  release(APPS);
  await second;
  assertEquals(paths, ["/apis/apps/v1", "/apis/apps/v1"]);
  await discovery.resolve(ref); // read and not invalidated since: from the cache
  assertEquals(paths.length, 2);
});

Deno.test("discovery: a failed read is thrown, not taken for a missing kind; what was read stays usable", async () => {
  const outage = new ApiError(503, { reason: "ServiceUnavailable", message: "etcd" });
  let up = false;
  let nowMs = 0;
  const reads: string[] = [];
  const discovery = new Discovery((path) => {
    reads.push(path);
    return up ? Promise.resolve(APPS) : Promise.reject(outage);
  }, { now: () => nowMs });
  const dep = { apiVersion: "apps/v1", kind: "Deployment" };
  assertEquals(await assertRejects(() => discovery.resolve(dep)), outage);
  // within the interval the failure is answered again without a read
  assertEquals(await assertRejects(() => discovery.resolve(dep)), outage);
  assertEquals(reads.length, 1);

  up = true;
  nowMs += DISCOVERY_MIN_REFRESH_INTERVAL_MS;
  assertEquals((await discovery.resolve(dep)).plural, "deployments");

  // With a cache: a miss whose refresh fails throws the failure; a hit is still answered.
  up = false;
  nowMs += DISCOVERY_MIN_REFRESH_INTERVAL_MS;
  assertEquals(
    await assertRejects(() => discovery.resolve({ ...dep, kind: "StatefulSet" })),
    outage,
  );
  assertEquals((await discovery.resolve(dep)).plural, "deployments");
  assertEquals(reads.length, 3);

  // A document that is no APIResourceList is a failure too, not a missing kind.
  const odd = new Discovery(() => Promise.resolve({ kind: "Status" }));
  const e = await assertRejects(() => odd.resolve(dep));
  assert(e instanceof TypeError && !isNoKindMatch(e), String(e));
});

Deno.test("discovery: invalidate and resolveAgain read a changed plural or scope, once per interval", async () => {
  const f = fake({
    "/apis/g.example.com/v1": doc("g.example.com/v1", [["gammas", "Gamma", true]]),
  });
  const ref = { apiVersion: "g.example.com/v1", kind: "Gamma" };
  const old = await f.discovery.resolve(ref);

  f.docs["/apis/g.example.com/v1"] = doc("g.example.com/v1", [["gammaz", "Gamma", false]]);
  // within the interval: no read, the same type (the caller keeps its 404)
  assertEquals(await f.discovery.resolveAgain(ref, old), undefined);
  assertEquals(f.reads.length, 1);
  // the mark stays: the next resolve past the interval reads
  f.clock.advance(DISCOVERY_MIN_REFRESH_INTERVAL_MS);
  assertEquals(await f.discovery.resolve(ref), gType("Gamma", "gammaz", false));
  assertEquals(f.reads.length, 2);

  // resolveAgain past the interval answers the new type; the CRD gone: NoKindMatchError.
  const now = await f.discovery.resolve(ref);
  f.docs["/apis/g.example.com/v1"] = doc("g.example.com/v1", [["gammas", "Gamma", true]]);
  f.clock.advance(DISCOVERY_MIN_REFRESH_INTERVAL_MS);
  assertEquals(await f.discovery.resolveAgain(ref, now), old);
  f.docs["/apis/g.example.com/v1"] = undefined;
  f.clock.advance(DISCOVERY_MIN_REFRESH_INTERVAL_MS);
  const gone = await assertRejects(() => f.discovery.resolveAgain(ref, old));
  assert(isNoKindMatch(gone) && !gone.groupVersionServed, String(gone));
  // invalidating a group/version never read is a no-op
  f.discovery.invalidate({ apiVersion: "other.example.com/v1", kind: "X" });
});

Deno.test("discovery: isResourceNotServed tells a 404 of the resource from a 404 of an object", () => {
  assert(isResourceNotServed(notFound()));
  assert(isResourceNotServed(new ApiError(404))); // a body that is no Status
  assert(
    !isResourceNotServed(
      new ApiError(404, { reason: "NotFound", details: { name: "web", kind: "pods" } }),
    ),
  );
  assert(
    !isResourceNotServed(
      new ApiError(404, { reason: "NotFound", details: { name: "ns1", kind: "namespaces" } }),
    ),
  );
  assert(!isResourceNotServed(new ApiError(409, { reason: "Conflict" })));
  assert(!isResourceNotServed(new Error("404")));
});

Deno.test("discovery: DynamicClient sends once more on a type gone stale, once only, never to another scope", async () => {
  const f = fake({
    "/apis/g.example.com/v1": doc("g.example.com/v1", [["gammas", "Gamma", true]]),
  });
  const sent: string[] = [];
  let served = "gammas";
  const stub = {
    get: (rt: ResourceType, name: string) => {
      sent.push(`${rt.plural}${rt.namespaced ? " ns" : ""} ${name}`);
      if (rt.plural !== served) return Promise.reject(notFound());
      if (name === "absent") {
        return Promise.reject(new ApiError(404, { reason: "NotFound", details: { name } }));
      }
      return Promise.resolve({ metadata: { name } });
    },
    create: (rt: ResourceType, obj: unknown) => {
      sent.push(`create ${rt.plural} ${JSON.stringify(obj)}`);
      return Promise.resolve(obj);
    },
  } as unknown as KubeClient;
  const dynamic = new DynamicClient(stub, f.discovery);
  const ref = { group: "g.example.com", version: "v1", kind: "Gamma" };
  await dynamic.get(ref, "a", { namespace: "n" });
  assertEquals(sent, ["gammas ns a"]);
  // create fills in apiVersion and kind the body lacks, in a copy; it keeps those it has
  const body = { metadata: { name: "c" } };
  await dynamic.create(ref, body);
  await dynamic.create(ref, { apiVersion: "g.example.com/v1", kind: "Other" });
  assertEquals(sent.slice(1), [
    `create gammas {"metadata":{"name":"c"},"apiVersion":"g.example.com/v1","kind":"Gamma"}`,
    `create gammas {"apiVersion":"g.example.com/v1","kind":"Other"}`,
  ]);
  assertEquals(body, { metadata: { name: "c" } });

  // The CRD is made again cluster-scoped as gammaz: one 404, one read, and no second request,
  // which would drop the namespace the caller named and reach the cluster-scoped object "a".
  served = "gammaz";
  f.docs["/apis/g.example.com/v1"] = doc("g.example.com/v1", [["gammaz", "Gamma", false]]);
  f.clock.advance(DISCOVERY_MIN_REFRESH_INTERVAL_MS);
  sent.length = 0;
  const moved = await assertRejects(() => dynamic.get(ref, "a", { namespace: "n" }));
  assert(moved instanceof ScopeChangedError, String(moved));
  assertEquals(
    [moved.group, moved.version, moved.kind, moved.namespace, moved.namespaced],
    ["g.example.com", "v1", "Gamma", "n", false],
  );
  assert(isResourceNotServed(moved.cause), String(moved.cause));
  assertEquals([sent, f.reads.length], [["gammas ns a"], 2]);
  // Positive control: without the namespace, the same request reaches gammaz.
  assertEquals(await dynamic.get(ref, "a"), { metadata: { name: "a" } });
  assertEquals([sent, f.reads.length], [["gammas ns a", "gammaz a"], 2]);

  // Made again as gammay, still cluster-scoped: the scope fits, the request is sent once more.
  served = "gammay";
  f.docs["/apis/g.example.com/v1"] = doc("g.example.com/v1", [["gammay", "Gamma", false]]);
  f.clock.advance(DISCOVERY_MIN_REFRESH_INTERVAL_MS);
  sent.length = 0;
  assertEquals(await dynamic.get(ref, "a"), { metadata: { name: "a" } });
  assertEquals([sent, f.reads.length], [["gammaz a", "gammay a"], 3]);

  // The reverse: made again namespaced as gammax, asked for with no namespace: not sent again.
  served = "gammax";
  f.docs["/apis/g.example.com/v1"] = doc("g.example.com/v1", [["gammax", "Gamma", true]]);
  f.clock.advance(DISCOVERY_MIN_REFRESH_INTERVAL_MS);
  sent.length = 0;
  const reverse = await assertRejects(() => dynamic.get(ref, "a"));
  assert(reverse instanceof ScopeChangedError && reverse.namespaced, String(reverse));
  assertEquals(reverse.namespace, undefined);
  assertEquals([sent, f.reads.length], [["gammay a"], 4]);
  assertEquals(await dynamic.get(ref, "a", { namespace: "n" }), { metadata: { name: "a" } });
  assertEquals(sent, ["gammay a", "gammax ns a"]);

  // Back to cluster-scoped gammaz for the rest.
  served = "gammaz";
  f.docs["/apis/g.example.com/v1"] = doc("g.example.com/v1", [["gammaz", "Gamma", false]]);
  f.clock.advance(DISCOVERY_MIN_REFRESH_INTERVAL_MS);
  await f.discovery.resolveAgain(ref, gType("Gamma", "gammax", true));
  const readsBefore = f.reads.length;

  // An object's 404 is the caller's answer: no read, no second request.
  sent.length = 0;
  f.clock.advance(DISCOVERY_MIN_REFRESH_INTERVAL_MS);
  const absent = await assertRejects(() => dynamic.get(ref, "absent"));
  assert(absent instanceof ApiError && !isResourceNotServed(absent), String(absent));
  assertEquals([sent, f.reads.length], [["gammaz absent"], readsBefore]);

  // A 404 of the resource that discovery does not explain: the 404 stands, one request more
  // at most (the document is read once and says the same).
  served = "nothing";
  sent.length = 0;
  const stale = await assertRejects(() => dynamic.get(ref, "a"));
  assert(isResourceNotServed(stale), String(stale));
  assertEquals([sent, f.reads.length], [["gammaz a"], readsBefore + 1]);
});
