/**
 * Several watched namespaces (`--watch-namespace a,b`): the setting's parsing, one store filled
 * by one reflector per namespace whose relists replace only their own namespace, and the
 * combined reflector status `/readyz` reads.
 */
import { assert, assertEquals } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import { PODS, SERVICES } from "../../lib/kube/resources.ts";
import type { InformerReflector } from "../../lib/runtime/controller.ts";
import {
  InformerRegistry,
  MultiNamespaceReflector,
  parseNamespaces,
} from "../../lib/runtime/informers.ts";
import { informerCheck } from "../../lib/runtime/health.ts";
import { objectKey, Store } from "../../lib/runtime/store.ts";

const obj = (namespace: string, name: string, rv = "1"): KubeObject => ({
  metadata: { name, namespace, resourceVersion: rv },
});

Deno.test("parseNamespaces: comma-separated, trimmed, no empties or repeats, sorted", () => {
  assertEquals(parseNamespaces(undefined), []);
  assertEquals(parseNamespaces(""), []);
  assertEquals(parseNamespaces("apps"), ["apps"]);
  assertEquals(parseNamespaces(" web , apps,,web "), ["apps", "web"]);
});

Deno.test("Store.beginReplace(namespace): a relist removes only its own namespace's objects", () => {
  const store = new Store<KubeObject>();
  const deleted: string[] = [];
  store.addHandler({ delete: (o) => deleted.push(objectKey(o)) });
  store.replace([obj("a", "x"), obj("a", "gone")], "a");
  store.replace([obj("b", "y")], "b");
  // a's relist: "gone" is no longer listed; b's object is not a's to remove.
  const counts = store.replace([obj("a", "x")], "a");
  assertEquals(counts, { added: 0, updated: 0, deleted: 1 });
  assertEquals(deleted, ["a/gone"]);
  assertEquals(store.keys().sort(), ["a/x", "b/y"]);
  // Positive control: without a namespace the replace is of the whole store.
  store.replace([obj("a", "x")]);
  assertEquals(store.keys(), ["a/x"]);
});

/** A reflector double with settable status. */
function part(status: Partial<InformerReflector> = {}): InformerReflector & { synced: boolean } {
  const p: { synced: boolean } & Record<string, unknown> = {
    synced: true,
    get hasSynced(): boolean {
      return p.synced;
    },
    failedAttempts: 0,
    state: { phase: "watching" },
    run: () => Promise.resolve(),
    waitForSync: () => Promise.resolve(),
    ...status,
  };
  return p as unknown as InformerReflector & { synced: boolean };
}

Deno.test("MultiNamespaceReflector: synced when all are; /readyz names the worst part", async () => {
  const a = part();
  const b = part({ state: { phase: "listing" } });
  b.synced = false;
  const m = new MultiNamespaceReflector([a, b]);
  assert(!m.hasSynced);
  assertEquals(informerCheck(m, () => 0)(), "not synced (listing)");
  b.synced = true;
  assert(m.hasSynced);
  assertEquals(informerCheck(m, () => 0)(), undefined);
  const failing = new MultiNamespaceReflector([
    a,
    part({ failingSinceMs: 1_000, failedAttempts: 4, lastError: "403 forbidden" }),
  ]);
  assertEquals(
    informerCheck(failing, () => 41_000)(),
    "list/watch failing for 40 s (4 attempts): 403 forbidden",
  );
  const deaf = new MultiNamespaceReflector([a, part({ deaf: { sinceMs: 0, reason: "no byte" } })]);
  assertEquals(informerCheck(deaf, () => 5_000)(), "watch deaf for 5 s (no byte)");
  await m.waitForSync();
  await m.run(new AbortController().signal);
});

Deno.test("InformerRegistry: watchNamespace a,b makes one reflector per namespace, one store", () => {
  const made: (string | undefined)[] = [];
  const registry = new InformerRegistry({
    watchNamespace: "b,a",
    reflector: (_r, _s, ns) => {
      made.push(ns);
      return part() as never;
    },
    onHandlerError: () => {},
  });
  const pods = registry.informer(PODS);
  assertEquals(made, ["a", "b"]);
  assertEquals(pods.namespaces, ["a", "b"]);
  assertEquals(pods.namespace, undefined);
  assert(pods.reflector instanceof MultiNamespaceReflector);
  // The same informer for the same setting in another order; a single namespace stays single.
  assertEquals(registry.informer(PODS, { namespace: "a,b" }), pods);
  const svc = registry.informer(SERVICES, { namespace: "a" });
  assertEquals(svc.namespace, "a");
  assertEquals(svc.namespaces, undefined);
  assertEquals(made, ["a", "b", "a"]);
});
