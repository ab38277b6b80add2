/**
 * S19 up front, in process: the CRD's CEL rules and their TypeScript twins, quantities as the
 * apiserver parses them, the shared table of specs the Pod or Service API would refuse (the e2e
 * validation test runs the same table against the apiserver), Service port naming and the merge
 * patch of S20.
 */
import fc from "fast-check";
import type { Service } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { appServiceCrd, validateSpec } from "../../lib/appservice/schema.ts";
import { as } from "./schema_test.ts";
import { type CelRule, twinOf } from "../../lib/appservice/rules.ts";
import { quantityIsInteger, quantityNanos } from "../../lib/appservice/quantity.ts";
import {
  desiredService,
  SERVICE_HASH_ANNOTATION,
  serviceMatches,
  servicePatch,
} from "../../lib/appservice/service.ts";
import { specArbitrary } from "../fixtures/spec_arbitrary.ts";

/**
 * Specs the Pod or the Service API would refuse: [what, spec, field the 422 names]. The e2e
 * validation test creates each against the apiserver and checks the same field is named.
 */
export const REFUSED_SPECS: [string, Record<string, unknown>, string][] = [
  [
    "two ports with the same name",
    {
      image: "nginx:1",
      ports: [{ name: "http", containerPort: 80 }, { name: "http", containerPort: 81 }],
    },
    "spec.ports",
  ],
  [
    "the same containerPort twice",
    { image: "nginx:1", ports: [{ containerPort: 80 }, { containerPort: 80, name: "b" }] },
    "spec.ports[1]",
  ],
  [
    "a port name without a letter",
    { image: "nginx:1", ports: [{ name: "80", containerPort: 80 }] },
    "spec.ports[0].name",
  ],
  [
    "a port name with --",
    { image: "nginx:1", ports: [{ name: "a--b", containerPort: 80 }] },
    "spec.ports[0].name",
  ],
  [
    "the same hostPort twice",
    {
      image: "nginx:1",
      ports: [{ containerPort: 80, hostPort: 8080 }, { containerPort: 81, hostPort: 8080 }],
    },
    "spec.ports",
  ],
  [
    "an env name starting with a digit",
    { image: "nginx:1", env: [{ name: "1A", value: "x" }] },
    "spec.env[0].name",
  ],
  ["an env name '..'", { image: "nginx:1", env: [{ name: "..", value: "x" }] }, "spec.env[0].name"],
  [
    "the same env name twice",
    { image: "nginx:1", env: [{ name: "A", value: "1" }, { name: "A", value: "2" }] },
    "spec.env[1]",
  ],
  [
    "value and valueFrom",
    {
      image: "nginx:1",
      env: [{ name: "A", value: "1", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } }],
    },
    "spec.env[0].valueFrom",
  ],
  [
    "two sources in valueFrom",
    {
      image: "nginx:1",
      env: [{
        name: "A",
        valueFrom: {
          fieldRef: { fieldPath: "metadata.name" },
          secretKeyRef: { name: "s", key: "k" },
        },
      }],
    },
    "spec.env[0].valueFrom",
  ],
  [
    "an unsupported fieldPath",
    {
      image: "nginx:1",
      env: [{ name: "A", valueFrom: { fieldRef: { fieldPath: "status.phase" } } }],
    },
    "spec.env[0].valueFrom.fieldRef.fieldPath",
  ],
  [
    "a cpu divisor of 1k",
    {
      image: "nginx:1",
      env: [{
        name: "A",
        valueFrom: { resourceFieldRef: { resource: "limits.cpu", divisor: "1k" } },
      }],
    },
    "spec.env[0].valueFrom.resourceFieldRef.divisor",
  ],
  [
    "a configMapKeyRef without a name",
    { image: "nginx:1", env: [{ name: "A", valueFrom: { configMapKeyRef: { key: "k" } } }] },
    "spec.env[0].valueFrom.configMapKeyRef.name",
  ],
  [
    "a negative quantity",
    { image: "nginx:1", resources: { limits: { cpu: "-1" } } },
    "spec.resources.limits[cpu]",
  ],
  ["a quantity with a fractional exponent", {
    image: "nginx:1",
    resources: { limits: { cpu: "1e1.5" } },
  }, "spec.resources.limits[cpu]"],
  [
    "an unknown resource name",
    { image: "nginx:1", resources: { limits: { gpu: "1" } } },
    "spec.resources.limits",
  ],
  [
    "a request above its limit",
    { image: "nginx:1", resources: { requests: { cpu: "2" }, limits: { cpu: "1" } } },
    "spec.resources.requests",
  ],
  [
    "an extended resource requested without a limit",
    { image: "nginx:1", resources: { requests: { "example.com/gpu": 1 } } },
    "spec.resources.limits",
  ],
  [
    "half an extended resource",
    {
      image: "nginx:1",
      resources: { requests: { "example.com/gpu": "0.5" }, limits: { "example.com/gpu": "0.5" } },
    },
    "spec.resources.limits",
  ],
  [
    "hugepages without cpu or memory",
    { image: "nginx:1", resources: { limits: { "hugepages-2Mi": "4Mi" } } },
    "spec.resources",
  ],
  [
    "hugepages not a multiple of the page size",
    { image: "nginx:1", resources: { limits: { "hugepages-2Mi": "3Mi", memory: "1Gi" } } },
    "spec.resources.limits",
  ],
];

/** Specs at the edge that the Pod and Service APIs accept, so the CRD must too. */
export const ACCEPTED_SPECS: Record<string, unknown>[] = [
  {
    image: "nginx:1",
    ports: [{ containerPort: 53, protocol: "UDP", name: "dns" }, {
      containerPort: 53,
      protocol: "TCP",
      name: "dns-tcp",
    }],
  },
  { image: "nginx:1", ports: [{ containerPort: 80 }, { containerPort: 81, name: "port-0-80" }] },
  {
    image: "nginx:1",
    env: [
      { name: ".x", value: "1" },
      {
        name: "my-var.A",
        valueFrom: { fieldRef: { fieldPath: "metadata.labels['example.com/tier']" } },
      },
      {
        name: "MEM",
        valueFrom: { resourceFieldRef: { resource: "limits.memory", divisor: "1Mi" } },
      },
      { name: "CM", valueFrom: { configMapKeyRef: { name: "my.config", key: ".k" } } },
    ],
  },
  {
    image: "nginx:1",
    resources: {
      requests: { cpu: "250m", memory: "1Gi", "hugepages-2Mi": "4Mi", "example.com/gpu": 2 },
      limits: { cpu: 1, memory: "1Gi", "hugepages-2Mi": "4Mi", "example.com/gpu": "2" },
    },
  },
  { image: "nginx:1", resources: { requests: { cpu: "1e-10" }, limits: { cpu: "1n" } } },
];

Deno.test("rules: every CEL rule of the generated CRD has an in-process twin", () => {
  const rules: CelRule[] = [];
  const walk = (node: unknown) => {
    if (Array.isArray(node)) return node.forEach(walk);
    if (!node || typeof node !== "object") return;
    const o = node as Record<string, unknown>;
    rules.push(...((o["x-kubernetes-validations"] as CelRule[] | undefined) ?? []));
    Object.values(o).forEach(walk);
  };
  walk(appServiceCrd());
  assert(rules.length >= 15, `only ${rules.length} rules`);
  for (const r of rules) {
    assert(twinOf(r.rule), `no twin for ${r.rule}`);
    assert(r.message.length > 10, `no readable message for ${r.rule}`);
  }
});

Deno.test("rules: refused specs name the field; edge specs pass", () => {
  for (const [what, spec, field] of REFUSED_SPECS) {
    const { errors } = validateSpec(spec);
    assert(
      errors.some((e) => e.startsWith(field)),
      `${what}: ${field} not named in ${errors.join("; ")}`,
    );
  }
  for (const spec of ACCEPTED_SPECS) {
    assertEquals(validateSpec(spec).errors, [], JSON.stringify(spec));
  }
});

Deno.test("rules: validateSpec never throws and is deterministic on generated specs", () => {
  fc.assert(
    fc.property(specArbitrary, (spec) => {
      const a = validateSpec(spec).errors;
      assertEquals(validateSpec(structuredClone(spec)).errors, a);
    }),
    { seed: 19, numRuns: 2_000 },
  );
});

Deno.test("quantity: values in nano-units as ParseQuantity rounds them", () => {
  const cases: [unknown, bigint | undefined][] = [
    ["1", 1_000_000_000n],
    [2, 2_000_000_000n],
    ["500m", 500_000_000n],
    ["1.5Gi", 1_610_612_736_000_000_000n],
    ["1e3", 1_000_000_000_000n],
    ["1e-10", 1n], // rounded up to 1n
    ["+.5", 500_000_000n],
    ["1.", 1_000_000_000n],
    ["0", 0n],
    ["-1", undefined],
    ["1e1.5", undefined],
    ["1e100", undefined],
    ["lots", undefined],
    [" 1", undefined],
    [1.5, undefined],
  ];
  for (const [q, want] of cases) assertEquals(quantityNanos(q), want, String(q));
});

Deno.test("quantity: isInteger follows the parsed representation, as CEL's does", () => {
  const cases: [unknown, boolean][] = [
    ["2", true],
    [2, true],
    ["2Mi", true],
    ["1e3", true],
    ["1.5k", true],
    ["0", true],
    ["000", true],
    ["1.0", false],
    ["1000m", false],
    ["1.5", false],
    ["1.5Mi", false],
    ["1e-3", false],
    ["1E", true],
    ["9999999999999999999", false],
  ];
  for (const [q, want] of cases) assertEquals(quantityIsInteger(q), want, String(q));
});

Deno.test("service: generated port names never collide with declared ones", () => {
  const svc = desiredService(as({
    image: "nginx:1",
    ports: [{ containerPort: 80 }, { containerPort: 81, name: "port-0-80" }, { containerPort: 82 }],
  }))!;
  const names = svc.spec!.ports!.map((p) => p.name);
  assertEquals(names, ["port-0-80-1", "port-0-80", "port-2-82"]);
  assertEquals(new Set(names).size, names.length);
  const one = desiredService(as({ image: "nginx:1", ports: [{ containerPort: 80 }] }))!;
  assertEquals(one.spec!.ports![0].name, undefined);
});

Deno.test("service: the AppService's ports and selector exactly; others' labels are kept", () => {
  const want = desiredService(
    as({
      image: "nginx:1",
      ports: [{ name: "http", containerPort: 80 }, { name: "m", containerPort: 90 }],
    }),
  )!;
  const live: Service = structuredClone(want);
  live.spec!.clusterIP = "10.0.0.7";
  live.metadata!.labels!.team = "web";
  live.metadata!.annotations!["example.com/note"] = "x";
  live.spec!.ports!.reverse();
  assert(serviceMatches(live, want), "server defaults, foreign labels or port order are no drift");
  const extra = structuredClone(live);
  extra.spec!.ports!.push({ name: "extra", port: 81, targetPort: 81, protocol: "TCP" });
  assert(!serviceMatches(extra, want), "a port another writer added is drift");
  const proto = structuredClone(live);
  proto.spec!.ports![0].appProtocol = "http";
  assert(!serviceMatches(proto, want));
  const sel = structuredClone(live);
  sel.spec!.selector!.tier = "x";
  assert(!serviceMatches(sel, want));
  // Of the operator's own metadata only the labels it relies on count (a policy may rewrite the
  // informational name label or drop the hash annotation without a write per reconcile).
  const renamed = structuredClone(live);
  renamed.metadata!.labels!["app.kubernetes.io/name"] = "platform";
  delete renamed.metadata!.annotations![SERVICE_HASH_ANNOTATION];
  assert(serviceMatches(renamed, want));
  const unmanaged = structuredClone(live);
  delete unmanaged.metadata!.labels!["app.kubernetes.io/managed-by"];
  assert(!serviceMatches(unmanaged, want), "out of the operator's sight without managed-by");

  sel.spec!.type = "NodePort";
  const patch = servicePatch(sel, want) as {
    metadata: { labels: Record<string, string> };
    spec: Record<string, unknown> & { selector: Record<string, string | null> };
  };
  assertEquals(patch.spec.ports, want.spec!.ports);
  assertEquals(patch.spec.selector.tier, null);
  assertEquals(patch.spec.type, "ClusterIP");
  assertEquals(patch.spec.externalTrafficPolicy, null);
  assertEquals(patch.metadata.labels, want.metadata!.labels, "only the operator's labels");
});
