/**
 * Predicates (lib/runtime/predicates.ts): labelsChanged, annotationsChanged and
 * resourceVersionChanged decide updates only (creates and deletes pass), and the composition
 * and / or / not, judged through `passes` as the controller's handlers apply them. A property test
 * builds random trees of predicates (each leaf deciding some kinds of change and omitting others)
 * and checks that `passes` of a tree is the boolean formula of its leaves with an omitted decision
 * taken as a pass: not negates, and is every, or is some, and `and(...ps)` is a watch's own list.
 * Also the AppService controller's priority predicate for owned Pods (POD_READINESS_CHANGED).
 */
import fc from "fast-check";
import { assert, assertEquals } from "../assert.ts";
import { POD_READINESS_CHANGED } from "../../lib/appservice/controller.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import {
  allOf,
  and,
  annotationsChanged,
  anyOf,
  generationChanged,
  labelsChanged,
  not,
  or,
  passes,
  type Predicate,
  resourceVersionChanged,
} from "../../lib/runtime/predicates.ts";

type Change =
  | { type: "create"; obj: KubeObject }
  | { type: "update"; oldObj: KubeObject; newObj: KubeObject }
  | { type: "delete"; obj: KubeObject };

const base: KubeObject = {
  metadata: {
    name: "a",
    generation: 1,
    resourceVersion: "10",
    labels: { app: "web" },
    annotations: { note: "x" },
  },
};
/** `base` with metadata changed by `m`. */
const edit = (m: Record<string, unknown>): KubeObject => ({
  metadata: { ...base.metadata, ...m },
});
const update = (newObj: KubeObject): Change => ({ type: "update", oldObj: base, newObj });
const pass = (p: Predicate<KubeObject>, c: Change) => passes([p], c);

Deno.test("labelsChanged: an entry added, removed or changed passes; the same labels do not; absent = empty", () => {
  assertEquals(pass(labelsChanged, update(edit({}))), false);
  assertEquals(pass(labelsChanged, update(edit({ resourceVersion: "11", generation: 2 }))), false);
  assertEquals(pass(labelsChanged, update(edit({ labels: { app: "db" } }))), true);
  assertEquals(pass(labelsChanged, update(edit({ labels: { app: "web", x: "" } }))), true);
  assertEquals(pass(labelsChanged, update(edit({ labels: {} }))), true);
  assertEquals(pass(labelsChanged, update(edit({ labels: { other: "web" } }))), true);
  const none = edit({ labels: undefined });
  assertEquals(
    passes([labelsChanged], { type: "update", oldObj: none, newObj: edit({ labels: {} }) }),
    false,
  );
  assertEquals(pass(labelsChanged, { type: "create", obj: base }), true);
  assertEquals(pass(labelsChanged, { type: "delete", obj: base }), true);
});

Deno.test("annotationsChanged: as labelsChanged, for annotations", () => {
  assertEquals(pass(annotationsChanged, update(edit({ labels: { app: "db" } }))), false);
  assertEquals(pass(annotationsChanged, update(edit({ annotations: { note: "y" } }))), true);
  assertEquals(pass(annotationsChanged, update(edit({ annotations: undefined }))), true);
  assertEquals(pass(annotationsChanged, { type: "create", obj: base }), true);
  assertEquals(pass(annotationsChanged, { type: "delete", obj: base }), true);
});

Deno.test("resourceVersionChanged: a new resourceVersion passes, a resync-like update does not", () => {
  assertEquals(pass(resourceVersionChanged, update(structuredClone(base))), false);
  assertEquals(pass(resourceVersionChanged, update(edit({ resourceVersion: "11" }))), true);
  assertEquals(pass(resourceVersionChanged, { type: "create", obj: base }), true);
  assertEquals(pass(resourceVersionChanged, { type: "delete", obj: base }), true);
});

Deno.test("and / or / not: each kind of change, omitted decisions as passes", () => {
  const creates = { type: "create", obj: base } as const;
  const deletes = { type: "delete", obj: base } as const;
  const specChange = update(edit({ generation: 2, resourceVersion: "11" }));
  const labelChange = update(edit({ labels: {}, resourceVersion: "11" }));
  const nothing = update(edit({ resourceVersion: "11" }));
  // Passes (+) or not (-): create, delete, spec change, label change, only a new resourceVersion.
  const table: [string, Predicate<KubeObject>, string][] = [
    ["or(generation, labels)", or(generationChanged, labelsChanged), "++++-"],
    ["and(generation, labels)", and(generationChanged, labelsChanged), "++---"],
    ["not(generation)", not(generationChanged), "---++"],
    ["not(not(generation))", not(not(generationChanged)), "+++--"],
    ["and()", and(), "+++++"],
    ["or()", or(), "-----"],
    ["and(rv, not(generation))", and(resourceVersionChanged, not(generationChanged)), "---++"],
  ];
  const changes = [creates, deletes, specChange, labelChange, nothing];
  for (const [name, p, want] of table) {
    assertEquals(changes.map((c) => (pass(p, c) ? "+" : "-")).join(""), want, name);
  }
  assertEquals(and, allOf);
  assertEquals(or, anyOf);
});

/** A predicate tree: leaves decide per kind (or omit), inner nodes compose. */
type Tree =
  | { leaf: { create?: boolean; update?: "gen" | boolean; delete?: boolean } }
  | { not: Tree }
  | { and: Tree[] }
  | { or: Tree[] };

const decision = fc.option(fc.boolean(), { nil: undefined });
const leaf = fc.record({
  create: decision,
  update: fc.option(fc.oneof(fc.boolean(), fc.constant("gen" as const)), { nil: undefined }),
  delete: decision,
}).map((d) => {
  // Omitted decisions are left out of the object, as a predicate written by hand leaves them.
  const l: Extract<Tree, { leaf: unknown }>["leaf"] = {};
  if (d.create !== undefined) l.create = d.create;
  if (d.update !== undefined) l.update = d.update;
  if (d.delete !== undefined) l.delete = d.delete;
  return { leaf: l } as Tree;
});
const tree: fc.Arbitrary<Tree> = fc.letrec<{ t: Tree }>((tie) => ({
  t: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    leaf,
    fc.record({ not: tie("t") }),
    fc.record({ and: fc.array(tie("t"), { maxLength: 3 }) }),
    fc.record({ or: fc.array(tie("t"), { maxLength: 3 }) }),
  ),
})).t;

/** The predicate a tree stands for, built with the functions under test. */
function build(t: Tree): Predicate<KubeObject> {
  if ("not" in t) return not(build(t.not));
  if ("and" in t) return and(...t.and.map(build));
  if ("or" in t) return or(...t.or.map(build));
  const l = t.leaf;
  const p: Predicate<KubeObject> = {};
  if (l.create !== undefined) p.create = () => l.create!;
  if (l.delete !== undefined) p.delete = () => l.delete!;
  if (l.update === "gen") p.update = generationChanged.update;
  else if (l.update !== undefined) p.update = () => l.update as boolean;
  return p;
}

/** The formula a tree stands for, evaluated directly (omitted = pass). */
function truth(t: Tree, c: Change): boolean {
  if ("not" in t) return !truth(t.not, c);
  if ("and" in t) return t.and.every((x) => truth(x, c));
  if ("or" in t) return t.or.some((x) => truth(x, c));
  const d = t.leaf[c.type];
  if (d === undefined) return true;
  if (d === "gen") {
    const u = c as Extract<Change, { type: "update" }>;
    return u.oldObj.metadata?.generation !== u.newObj.metadata?.generation;
  }
  return d;
}

const change: fc.Arbitrary<Change> = fc.oneof(
  fc.constant<Change>({ type: "create", obj: base }),
  fc.constant<Change>({ type: "delete", obj: base }),
  fc.integer({ min: 1, max: 2 }).map((g): Change => update(edit({ generation: g }))),
);

Deno.test("and / or / not (property): passes of a tree is its formula; and(...ps) is the list ps", () => {
  fc.assert(fc.property(tree, change, (t, c) => {
    const p = build(t);
    assertEquals(passes([p], c), truth(t, c));
    assertEquals(passes([not(p)], c), !passes([p], c));
  }));
  fc.assert(fc.property(fc.array(tree, { maxLength: 4 }), change, (ts, c) => {
    const ps = ts.map(build);
    assertEquals(passes([and(...ps)], c), passes(ps, c));
    assertEquals(passes([or(...ps)], c), ps.some((p) => passes([p], c)));
  }));
});

Deno.test("POD_READINESS_CHANGED: a Pod's Ready flip and its removal are high priority; its create and other updates are not", () => {
  const pod = (ready?: "True" | "False", rv = "1"): KubeObject =>
    ({
      metadata: { namespace: "ns", name: "p", resourceVersion: rv },
      status: ready ? { conditions: [{ type: "Ready", status: ready }] } : {},
    }) as KubeObject;
  const p = [POD_READINESS_CHANGED];
  assert(!passes(p, { type: "create", obj: pod("True") }), "create");
  assert(passes(p, { type: "update", oldObj: pod("False"), newObj: pod("True", "2") }), "Ready");
  assert(passes(p, { type: "update", oldObj: pod("True"), newObj: pod("False", "2") }), "unready");
  assert(!passes(p, { type: "update", oldObj: pod(), newObj: pod("False", "2") }), "no flip");
  assert(!passes(p, { type: "update", oldObj: pod("True"), newObj: pod("True", "2") }), "same");
  assert(passes(p, { type: "delete", obj: pod("True") }), "delete");
});
