import fc from "fast-check";
import { assert, assertEquals, assertRejects } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import {
  CONTROLLER_UID_INDEX,
  controllerUidIndex,
  deepFreeze,
  objectKey,
  splitKey,
  Store,
} from "../../lib/runtime/store.ts";

const obj = (name: string, rv: string, owner?: string): KubeObject => ({
  metadata: {
    name,
    namespace: "ns",
    resourceVersion: rv,
    ownerReferences: owner
      ? [{ apiVersion: "v1", kind: "X", name: "o", uid: owner, controller: true }]
      : undefined,
    managedFields: [{ manager: "m" }],
  },
});

/** What `fn` threw ("none" if nothing): the name of the error. */
function thrown(fn: () => unknown): string {
  try {
    fn();
    return "none";
  } catch (err) {
    return (err as Error).name;
  }
}

function recorder(store: Store<KubeObject>) {
  const log: string[] = [];
  store.addHandler({
    add: (o) => log.push(`add ${objectKey(o)}`),
    update: (a, b) =>
      log.push(
        `update ${objectKey(b)} ${a.metadata?.resourceVersion}->${b.metadata?.resourceVersion}`,
      ),
    delete: (o) => log.push(`delete ${objectKey(o)}`),
  });
  return log;
}

Deno.test("store: keys, split, managedFields dropped, owner index", () => {
  const s = new Store<KubeObject>({
    freeze: true,
    indexes: { [CONTROLLER_UID_INDEX]: controllerUidIndex },
  });
  s.upsert(obj("a", "1", "u1"));
  s.upsert(obj("b", "1", "u1"));
  s.upsert(obj("c", "1", "u2"));
  assertEquals(objectKey(obj("a", "1")), "ns/a");
  assertEquals(splitKey("ns/a"), { namespace: "ns", name: "a" });
  assertEquals(splitKey("cluster"), { namespace: "", name: "cluster" });
  assertEquals(s.get("ns/a")?.metadata?.managedFields, undefined);
  assertEquals(s.byIndex(CONTROLLER_UID_INDEX, "u1").map(objectKey).sort(), ["ns/a", "ns/b"]);
  s.upsert(obj("b", "2", "u2")); // owner changed: index follows
  assertEquals(s.byIndex(CONTROLLER_UID_INDEX, "u1").map(objectKey), ["ns/a"]);
  s.remove(obj("a", "3"));
  assertEquals(s.byIndex(CONTROLLER_UID_INDEX, "u1"), []);
});

Deno.test("store: managedFields cleared in place on the object given (no copy), kept on request", () => {
  const s = new Store<KubeObject>({ freeze: true });
  const given = obj("a", "1");
  s.upsert(given);
  assertEquals(s.get("ns/a") === given, true, "the store copied the object");
  assertEquals(given.metadata?.managedFields, undefined);
  assertEquals(JSON.stringify(s.get("ns/a")).includes("managedFields"), false);
  const keep = new Store<KubeObject>({ freeze: true, keepManagedFields: true });
  keep.upsert(obj("a", "1"));
  assertEquals(keep.get("ns/a")?.metadata?.managedFields, [{ manager: "m" }]);
});

Deno.test("store: replace emits deletes for vanished objects and nothing for unchanged ones", () => {
  const s = new Store<KubeObject>({ freeze: true });
  const log = recorder(s);
  s.replace([obj("a", "1"), obj("b", "1"), obj("c", "1")]);
  log.length = 0;
  const diff = s.replace([obj("a", "1"), obj("b", "5"), obj("d", "6")]);
  assertEquals(diff, { added: 1, updated: 1, deleted: 1 });
  assertEquals(log.sort(), ["add ns/d", "delete ns/c", "update ns/b 1->5"]);
  log.length = 0;
  s.replace([obj("a", "1"), obj("b", "5"), obj("d", "6")]);
  assertEquals(log, []); // a relist of unchanged objects causes no work (S4)
});

Deno.test("store: property — after replace the store equals the list, whatever came before", () => {
  fc.assert(fc.property(
    fc.array(fc.tuple(fc.integer({ min: 0, max: 20 }), fc.integer({ min: 1, max: 3 }))),
    fc.array(fc.tuple(fc.integer({ min: 0, max: 20 }), fc.integer({ min: 1, max: 3 }))),
    (before, after) => {
      const s = new Store<KubeObject>({
        freeze: true,
        indexes: { [CONTROLLER_UID_INDEX]: controllerUidIndex },
      });
      for (const [n, rv] of before) s.upsert(obj(`o${n}`, String(rv), `u${n % 3}`));
      const uniq = new Map(after.map(([n, rv]) => [n, rv]));
      const list = [...uniq].map(([n, rv]) => obj(`o${n}`, String(rv), `u${n % 3}`));
      s.replace(list);
      assertEquals(s.keys().sort(), list.map(objectKey).sort());
      let indexed = 0;
      for (const u of ["u0", "u1", "u2"]) indexed += s.byIndex(CONTROLLER_UID_INDEX, u).length;
      assertEquals(indexed, list.length); // no ghost index entries
    },
  ));
});

Deno.test("store: a list applied page by page: pages cached as they come, deletes at the end", async () => {
  const s = new Store<KubeObject>({ freeze: true });
  const log = recorder(s);
  s.replace([obj("a", "1"), obj("b", "1"), obj("c", "1")]);
  log.length = 0;
  const r = s.beginReplace();
  r.add([obj("a", "1"), obj("b", "2")]);
  // The first page is cached at once; nothing is deleted before the last page.
  assertEquals(log, ["update ns/b 1->2"]);
  assertEquals(s.keys().sort(), ["ns/a", "ns/b", "ns/c"]);
  r.add([obj("d", "3")]);
  assertEquals(s.get("ns/d")?.metadata?.resourceVersion, "3");
  assertEquals(r.finish(), { added: 1, updated: 1, deleted: 1 });
  assertEquals(log, ["update ns/b 1->2", "add ns/d", "delete ns/c"]);
  assertEquals(s.keys().sort(), ["ns/a", "ns/b", "ns/d"]);
  await assertRejects(() => r.add([obj("e", "4")]), /after it finished/);
  await assertRejects(() => r.finish(), /finished twice/);
  // A replace that never finishes (a list failed mid-way) deletes nothing.
  const broken = s.beginReplace();
  broken.add([obj("a", "1")]);
  assertEquals(s.keys().sort(), ["ns/a", "ns/b", "ns/d"]);
});

Deno.test("store: property — pages in any split give the same store and events as one replace", () => {
  fc.assert(fc.property(
    fc.array(fc.tuple(fc.integer({ min: 0, max: 20 }), fc.integer({ min: 1, max: 3 }))),
    fc.array(fc.tuple(fc.integer({ min: 0, max: 20 }), fc.integer({ min: 1, max: 3 }))),
    fc.integer({ min: 1, max: 5 }),
    (before, after, pageSize) => {
      const list = () =>
        [...new Map(after.map(([n, rv]) => [n, rv]))].map(([n, rv]) => obj(`o${n}`, String(rv)));
      const whole = new Store<KubeObject>({ freeze: true });
      const paged = new Store<KubeObject>({ freeze: true });
      for (const [n, rv] of before) {
        whole.upsert(obj(`o${n}`, String(rv)));
        paged.upsert(obj(`o${n}`, String(rv)));
      }
      const logWhole = recorder(whole), logPaged = recorder(paged);
      const a = whole.replace(list());
      const r = paged.beginReplace();
      const items = list();
      for (let i = 0; i < items.length; i += pageSize) r.add(items.slice(i, i + pageSize));
      assertEquals(r.finish(), a);
      assertEquals(logPaged, logWhole);
      assertEquals(paged.keys().sort(), whole.keys().sort());
    },
  ));
});

Deno.test("store: the transform runs on every object cached or handed out, after managedFields", () => {
  type Obj = KubeObject & { spec?: { big: string }; status?: { phase: string } };
  const seen: (unknown[] | undefined)[] = [];
  const s = new Store<Obj>({
    freeze: true,
    transform: (o) => {
      seen.push(o.metadata?.managedFields);
      o.spec = undefined;
      return o;
    },
  });
  const deleted: Obj[] = [];
  s.addHandler({ delete: (o) => deleted.push(o) });
  const mk = (name: string, rv: string): Obj => ({
    ...obj(name, rv),
    spec: { big: "x".repeat(100) },
    status: { phase: "Running" },
  });
  s.replace([mk("a", "1"), mk("b", "1")]); // list
  s.upsert(mk("a", "2")); // watch MODIFIED
  s.remove(mk("b", "3")); // watch DELETED: the handler gets the transformed final state
  assertEquals(s.get("ns/a")?.spec, undefined);
  assertEquals(s.get("ns/a")?.status, { phase: "Running" });
  assertEquals(deleted.map((o) => [objectKey(o), o.spec, o.status?.phase]), [
    ["ns/b", undefined, "Running"],
  ]);
  assertEquals(seen.every((m) => m === undefined), true, "managedFields dropped first");
  assertEquals(seen.length, 4);
});

Deno.test("store: with freeze, a reader that mutates a cached object throws; without, it corrupts the cache", () => {
  const frozen = new Store<KubeObject>({ freeze: true });
  let handed: KubeObject | undefined;
  frozen.addHandler({ add: (o) => handed = o });
  frozen.upsert(obj("a", "1", "u1"));
  const cached = frozen.get("ns/a")!;
  assert(handed === cached, "handlers get the cache's own object");
  assertEquals(thrown(() => (cached.metadata as { name?: string }).name = "z"), "TypeError");
  assertEquals(thrown(() => cached.metadata!.ownerReferences![0].uid = "u2"), "TypeError");
  assertEquals(
    thrown(() => frozen.list()[0].metadata!.ownerReferences!.push({} as never)),
    "TypeError",
  );
  assertEquals(frozen.get("ns/a")?.metadata?.resourceVersion, "1");
  // Deletes hand out the final state frozen too.
  let last: KubeObject | undefined;
  frozen.addHandler({ delete: (o) => last = o });
  frozen.remove(obj("a", "3"));
  assertEquals(Object.isFrozen(last?.metadata), true);
  // The control: the default store hands out mutable objects, and a mutation is seen by all.
  const plain = new Store<KubeObject>();
  plain.upsert(obj("a", "1"));
  assertEquals(thrown(() => (plain.get("ns/a")!.metadata as { name?: string }).name = "z"), "none");
  assertEquals(plain.get("ns/a")?.metadata?.name, "z");
});

Deno.test("store: deepFreeze freezes nested objects and arrays, and returns its argument", () => {
  const o = { a: { b: [{ c: 1 }] }, d: null, e: "x" };
  assert(deepFreeze(o) === o);
  assertEquals(
    [Object.isFrozen(o), Object.isFrozen(o.a), Object.isFrozen(o.a.b), Object.isFrozen(o.a.b[0])],
    [true, true, true, true],
  );
});

Deno.test("store: what a reader sees mid-relist (paged replace): per key old or new, deletes last", () => {
  const s = new Store<KubeObject>({
    freeze: true,
    indexes: { [CONTROLLER_UID_INDEX]: controllerUidIndex },
  });
  s.replace([obj("a", "1", "u1"), obj("b", "1", "u1"), obj("c", "1", "u1")]);
  // The apiserver now holds a@2, b@2 (moved to owner u2), and c is gone: relisted in two pages.
  const r = s.beginReplace();
  r.add([obj("a", "2", "u1")]);
  // A reconcile running now sees the relist half-applied:
  assertEquals(s.get("ns/a")?.metadata?.resourceVersion, "2"); // the first page: new
  assertEquals(s.get("ns/b")?.metadata?.resourceVersion, "1"); // not read yet: old
  assertEquals(s.get("ns/c")?.metadata?.resourceVersion, "1"); // gone, but still cached
  assertEquals(s.byIndex(CONTROLLER_UID_INDEX, "u1").map(objectKey).sort(), [
    "ns/a",
    "ns/b",
    "ns/c",
  ]);
  r.add([obj("b", "2", "u2")]);
  assertEquals(s.byIndex(CONTROLLER_UID_INDEX, "u2").map(objectKey), ["ns/b"]);
  assertEquals(s.get("ns/c")?.metadata?.resourceVersion, "1"); // deletes come only at the end
  r.finish();
  // Once finished, the store equals the list, and the index agrees.
  assertEquals(s.keys().sort(), ["ns/a", "ns/b"]);
  assertEquals(s.byIndex(CONTROLLER_UID_INDEX, "u1").map(objectKey), ["ns/a"]);
});
