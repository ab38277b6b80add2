import { assert, assertEquals } from "../assert.ts";
import fc from "fast-check";
import { renderCrd } from "../../lib/appservice/crd_gen.ts";
import {
  desiredPod,
  jsonEqual,
  podOrdinal,
  specHash,
  stableJson,
} from "../../lib/appservice/pods.ts";
import type { AppService } from "../../lib/appservice/schema.ts";
import { IMAGE_PATTERN, validateSpec } from "../../lib/appservice/schema.ts";
import { desiredService, serviceMatches } from "../../lib/appservice/service.ts";
import { mergeConditions, statusChanged } from "../../lib/appservice/status.ts";

/** Image references accepted (true) or rejected (false); the e2e test runs the same table. */
export const IMAGE_CASES: [string, boolean][] = [
  ["nginx:1.27", true],
  ["nginx:latest", true],
  ["library/nginx:1", true],
  ["localhost:5000/team/app:1.2.3", true],
  ["ghcr.io/org/app:v1.2.3", true],
  ["registry.example.com:443/a/b/c:tag_1-x.y", true],
  [`app@sha256:${"a".repeat(64)}`, true],
  [`ghcr.io/org/app:v1@sha256:${"0123456789abcdef".repeat(4)}`, true],
  ["nginx", false],
  ["ghcr.io/org/app", false],
  ["nginx: 1", false],
  ["my app:1", false],
  ["MyApp:1", false],
  ["ghcr.io/Org/app:1", false],
  [`app@sha256:${"a".repeat(63)}`, false],
  ["app:", false],
  [":1", false],
  ["app:-bad", false],
];

Deno.test("schema: image pattern (the one the apiserver enforces) on the shared table", () => {
  const re = new RegExp(IMAGE_PATTERN);
  for (const [image, ok] of IMAGE_CASES) assertEquals(re.test(image), ok, image);
});

Deno.test("schema: in-process validation applies defaults and names fields", () => {
  const { spec, errors } = validateSpec({ image: "nginx:1" });
  assertEquals(errors, []);
  assertEquals(spec.replicas, 1);
  assertEquals(spec.restartPolicy, "Always");
  const bad = validateSpec({ image: "nginx", replicas: 11, restartPolicy: "Sometimes" });
  assert(bad.errors.some((e) => e.startsWith("spec.image")), bad.errors.join());
  assert(bad.errors.some((e) => e.startsWith("spec.replicas")), bad.errors.join());
  assert(bad.errors.some((e) => e.startsWith("spec.restartPolicy")), bad.errors.join());
});

Deno.test("schema: committed crd/appservice.yaml matches the schema (run `deno task crd`)", async () => {
  const committed = await Deno.readTextFile(new URL("../../crd/appservice.yaml", import.meta.url));
  assertEquals(committed, renderCrd(), "crd/appservice.yaml is stale: run `deno task crd`");
  assert(
    !committed.includes("patternProperties") && !committed.includes("const:"),
    "not structural",
  );
});

/** An AppService `web` in `ns` with `spec` (uid and generation set), for pure tests. */
export const as = (spec: AppService["spec"]): AppService => ({
  apiVersion: "apps.our-org.com/v1",
  kind: "AppService",
  metadata: { name: "web", namespace: "ns", uid: "u-1", generation: 1 },
  spec,
});

Deno.test("pods: spec hash is stable across key order and changes with each Pod field", () => {
  const a = as({ image: "nginx:1", env: [{ name: "A", value: "1" }], replicas: 2 });
  const b = as({ replicas: 3, env: [{ value: "1", name: "A" }], image: "nginx:1" });
  assertEquals(specHash(a), specHash(b)); // replicas is not part of the Pod template
  const variants: AppService["spec"][] = [
    { image: "nginx:2" },
    { image: "nginx:1", env: [{ name: "A", value: "2" }] },
    { image: "nginx:1", ports: [{ containerPort: 80 }] },
    { image: "nginx:1", resources: { limits: { cpu: "1" } } },
    { image: "nginx:1", restartPolicy: "Never" },
  ];
  const hashes = new Set([
    specHash(as({ image: "nginx:1" })),
    ...variants.map((v) => specHash(as(v))),
  ]);
  assertEquals(hashes.size, variants.length + 1);
  assertEquals(stableJson({ b: 1, a: [{ d: 1, c: 2 }] }), '{"a":[{"c":2,"d":1}],"b":1}');
});

Deno.test("pods: names, ordinals, labels and a controller ownerReference", () => {
  const a = as({ image: "nginx:1" });
  const p = desiredPod(a, 2);
  assertEquals(p.metadata?.name, "web-2");
  assertEquals(podOrdinal(a, p), 2);
  assertEquals(podOrdinal(a, { metadata: { name: "web-x" } }), undefined);
  assertEquals(podOrdinal(a, { metadata: { name: "web-01" } }), undefined);
  assertEquals(p.metadata?.labels?.["app.kubernetes.io/managed-by"], "appservice-operator");
  assertEquals(p.metadata?.ownerReferences?.[0].controller, true);
  assertEquals(p.spec?.restartPolicy, "Always");
});

Deno.test("service: present only with ports; server defaults do not count as drift", () => {
  assertEquals(desiredService(as({ image: "nginx:1" })), undefined);
  const want = desiredService(
    as({ image: "nginx:1", ports: [{ containerPort: 80, protocol: "TCP" }] }),
  )!;
  const live = structuredClone(want);
  live.spec!.clusterIP = "10.0.0.7";
  live.spec!.sessionAffinity = "None";
  live.metadata!.labels!["extra"] = "x";
  assert(serviceMatches(live, want));
  live.spec!.ports![0].port = 81;
  assert(!serviceMatches(live, want));
});

Deno.test("status: lastTransitionTime moves only on a flip; lastReconciliation alone is no change", () => {
  const t0 = "2026-01-01T00:00:00.000Z";
  const t1 = "2026-01-01T00:01:00.000Z";
  const c0 = mergeConditions(
    undefined,
    [{ type: "Ready", status: "False", reason: "R", message: "" }],
    1,
    t0,
  );
  const c1 = mergeConditions(
    c0,
    [{ type: "Ready", status: "False", reason: "R2", message: "m" }],
    2,
    t1,
  );
  assertEquals(c1[0].lastTransitionTime, t0);
  assertEquals(c1[0].observedGeneration, 2);
  const c2 = mergeConditions(
    c1,
    [{ type: "Ready", status: "True", reason: "R", message: "" }],
    2,
    t1,
  );
  assertEquals(c2[0].lastTransitionTime, t1);
  assert(
    !statusChanged({ ready: true, lastReconciliation: t0 }, {
      ready: true,
      lastReconciliation: t1,
    }),
  );
  assert(statusChanged({ ready: true }, { ready: false }));
});

Deno.test("CRD: every field of spec and status has a description (kubectl explain)", async () => {
  const { appServiceCrd } = await import("../../lib/appservice/schema.ts");
  // deno-lint-ignore no-explicit-any
  const crd = appServiceCrd() as any;
  const root = crd.spec.versions[0].schema.openAPIV3Schema;
  const missing: string[] = [];
  // List items and map values are explained through their list or map; their fields are walked.
  const walk = (s: Record<string, unknown>, path: string, named: boolean) => {
    if (named && !s.description) missing.push(path);
    for (const [k, v] of Object.entries((s.properties ?? {}) as Record<string, object>)) {
      walk(v as Record<string, unknown>, `${path}.${k}`, true);
    }
    if (s.items) walk(s.items as Record<string, unknown>, `${path}[]`, false);
  };
  walk(root.properties.spec, "spec", true);
  walk(root.properties.status, "status", true);
  assertEquals(missing, [], `fields kubectl explain shows "<no description>" for`);
});

/**
 * JSON-like values, the shapes a status can take: undefined as an object's value or the whole
 * value, never an array element (JSON has none).
 */
const jsonish: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(tie("defined"), fc.constant(undefined)),
  defined: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constantFrom(null, true, false, 0, -0, 1, NaN, Infinity, "", "a", "undefined", "[]"),
    fc.integer(),
    fc.string({ maxLength: 3 }),
    fc.array(tie("defined"), { maxLength: 3 }),
    fc.dictionary(fc.constantFrom("a", "b", "c", "d"), tie("value"), { maxKeys: 4 }),
  ),
})).value;

/** `v` rebuilt with every object's keys in reverse order and an undefined key added. */
function reordered(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(reordered);
  if (v && typeof v === "object") {
    const out: Record<string, unknown> = { zz: undefined };
    for (const k of Object.keys(v).reverse()) out[k] = reordered((v as Record<string, unknown>)[k]);
    return out;
  }
  return v;
}

Deno.test("jsonEqual: the same answer as comparing stableJson texts", () => {
  fc.assert(
    fc.property(jsonish, jsonish, (a, b) => {
      assertEquals(jsonEqual(a, b), stableJson(a) === stableJson(b));
      assertEquals(jsonEqual(a, reordered(a)), stableJson(a) === stableJson(reordered(a)));
      assert(jsonEqual(a, reordered(a)) || stableJson(a) !== stableJson(reordered(a)));
    }),
    { numRuns: 2_000 },
  );
  assert(jsonEqual({ a: 1, b: undefined }, { a: 1 }));
  assert(!jsonEqual({ a: 1 }, { a: 1, b: null }));
  assert(!jsonEqual([1, 2], [2, 1]));
  assert(!jsonEqual({ a: [] }, { a: {} }));
  assert(!jsonEqual(undefined, {}) && !jsonEqual({}, undefined) && !jsonEqual([], "[]"));
  assert(jsonEqual(NaN, null) && jsonEqual(0, -0));
});

Deno.test("specHash: one hash per spec object, a new spec object hashed anew", () => {
  const a = as({ image: "nginx:1" });
  const h = specHash(a);
  assertEquals(specHash(a), h);
  assertEquals(specHash({ ...a, spec: { ...a.spec } }), h);
  assert(specHash({ ...a, spec: { ...a.spec, image: "nginx:2" } }) !== h);
  // Frozen, as the cache's objects are in the tests.
  assertEquals(specHash(Object.freeze({ ...a, spec: Object.freeze({ ...a.spec }) })), h);
});
