import fc from "fast-check";
import { assertEquals } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import {
  CONTROLLER_UID_INDEX,
  controllerUidIndex,
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
  const s = new Store<KubeObject>({ indexes: { [CONTROLLER_UID_INDEX]: controllerUidIndex } });
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
  const s = new Store<KubeObject>();
  const given = obj("a", "1");
  s.upsert(given);
  assertEquals(s.get("ns/a") === given, true, "the store copied the object");
  assertEquals(given.metadata?.managedFields, undefined);
  assertEquals(JSON.stringify(s.get("ns/a")).includes("managedFields"), false);
  const keep = new Store<KubeObject>({ keepManagedFields: true });
  keep.upsert(obj("a", "1"));
  assertEquals(keep.get("ns/a")?.metadata?.managedFields, [{ manager: "m" }]);
});

Deno.test("store: replace emits deletes for vanished objects and nothing for unchanged ones", () => {
  const s = new Store<KubeObject>();
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
      const s = new Store<KubeObject>({ indexes: { [CONTROLLER_UID_INDEX]: controllerUidIndex } });
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
