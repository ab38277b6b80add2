/**
 * Shard units (lib/runtime/shards.ts): FNV-1a vectors computed with Go's hash/fnv (the hash of
 * k8s.io/apimachinery/pkg/sharding HashField), the bounds, and properties: every hash is in
 * exactly one shard; the selector's ranges cover exactly the held shards, merged when adjacent.
 */
import fc from "fast-check";
import { assert, assertEquals } from "../assert.ts";
import {
  boundHex,
  fnv1a64,
  namespaceOfPath,
  shardBounds,
  shardOf,
  shardOfHash,
  shardSelector,
} from "../../lib/runtime/shards.ts";

/** `go run` of hash/fnv New64a over these strings (Go 1.x, printed `0x%016x`). */
/** Asserts that `fn` throws a RangeError. */
function assertRangeError(fn: () => unknown): void {
  try {
    fn();
  } catch (err) {
    assert(err instanceof RangeError, `not a RangeError: ${err}`);
    return;
  }
  assert(false, "did not throw");
}

const GO_FNV64A: [string, bigint][] = [
  ["", 0xcbf29ce484222325n],
  ["a", 0xaf63dc4c8601ec8cn],
  ["default", 0xebada5168620c5fen],
  ["kube-system", 0xdf65c7bc1d82b35en],
  ["foobar", 0x85944171f73967e8n],
  ["ns-1", 0x4a82b7ba48e25cc0n],
  ["ünïcødé", 0x7fe9369f83b596a0n],
];

Deno.test("shards: FNV-1a 64 matches Go's hash/fnv on known vectors (UTF-8 bytes)", () => {
  for (const [s, h] of GO_FNV64A) assertEquals(fnv1a64(s), h, JSON.stringify(s));
});

Deno.test("shards: bounds are floor(k * 2^64 / n), from 0 to 2^64", () => {
  assertEquals(shardBounds(1), [0n, 1n << 64n]);
  assertEquals(shardBounds(4), [0n, 1n << 62n, 1n << 63n, 3n << 62n, 1n << 64n]);
  assertEquals(shardBounds(3)[1], (1n << 64n) / 3n);
  assertRangeError(() => shardBounds(0));
  assertRangeError(() => shardBounds(257));
  assertRangeError(() => shardBounds(1.5));
});

Deno.test("shards: the selector writes 16-digit bounds and merges adjacent shards", () => {
  const r = (lo: string, hi: string) => `shardRange(object.metadata.namespace, '${lo}', '${hi}')`;
  assertEquals(shardSelector([], 4), "");
  assertEquals(shardSelector([0], 4), r("0x0000000000000000", "0x4000000000000000"));
  assertEquals(shardSelector([3], 4), r("0xc000000000000000", "0x10000000000000000"));
  assertEquals(
    shardSelector([3, 0, 1], 4),
    `${r("0x0000000000000000", "0x8000000000000000")} || ${
      r("0xc000000000000000", "0x10000000000000000")
    }`,
  );
  assertEquals(
    shardSelector([0, 1, 2, 3], 4),
    r("0x0000000000000000", "0x10000000000000000"),
  );
  assertRangeError(() => shardSelector([4], 4));
});

Deno.test("shards: namespaces of request paths; cluster-scoped paths have none", () => {
  assertEquals(namespaceOfPath("/api/v1/namespaces/a/pods/x"), "a");
  assertEquals(namespaceOfPath("/api/v1/namespaces/a/pods"), "a");
  assertEquals(namespaceOfPath("/apis/apps.our-org.com/v1/namespaces/b/appservices/x/status"), "b");
  assertEquals(namespaceOfPath("/apis/events.k8s.io/v1/namespaces/c/events"), "c");
  assertEquals(namespaceOfPath("/api/v1/namespaces/a"), undefined);
  assertEquals(namespaceOfPath("/api/v1/nodes/n"), undefined);
  assertEquals(namespaceOfPath("/apis/rbac.authorization.k8s.io/v1/clusterroles/x"), undefined);
});

const hash64 = fc.bigInt({ min: 0n, max: (1n << 64n) - 1n });
const shardCount = fc.integer({ min: 1, max: 256 });

Deno.test("shards property: every hash is in exactly one shard, the one shardOfHash names", () => {
  fc.assert(
    fc.property(hash64, shardCount, (h, n) => {
      const b = shardBounds(n);
      const holding = [];
      for (let k = 0; k < n; k++) if (b[k] <= h && h < b[k + 1]) holding.push(k);
      assertEquals(holding, [shardOfHash(h, n)]);
    }),
    { numRuns: 500 },
  );
  // The edges: each bound belongs to the shard it starts, the value before it to the one before.
  for (const n of [1, 2, 3, 7, 255, 256]) {
    const b = shardBounds(n);
    for (let k = 1; k < n; k++) {
      assertEquals(shardOfHash(b[k], n), k);
      assertEquals(shardOfHash(b[k] - 1n, n), k - 1);
    }
    assertEquals(shardOfHash((1n << 64n) - 1n, n), n - 1);
  }
});

Deno.test("shards property: shardOf(namespace) is the shard of its FNV-1a hash", () => {
  fc.assert(
    fc.property(fc.string(), shardCount, (ns, n) => {
      assertEquals(shardOf(ns, n), shardOfHash(fnv1a64(ns), n));
    }),
    { numRuns: 300 },
  );
});

/** The apiserver's match (sharding.Matches with HexLess): length first, then text. */
function serverMatches(selector: string, h: bigint): boolean {
  if (selector === "") return true;
  const hex = "0x" + h.toString(16).padStart(16, "0");
  const less = (a: string, b: string) => a.length !== b.length ? a.length < b.length : a < b;
  return selector.split(" || ").some((part) => {
    const m = /^shardRange\(object\.metadata\.namespace, '(0x[0-9a-f]+)', '(0x[0-9a-f]+)'\)$/
      .exec(part);
    assert(m, part);
    return !less(hex, m[1]) && less(hex, m[2]);
  });
}

Deno.test("shards property: the selector's ranges cover exactly the held shards, merged", () => {
  fc.assert(
    fc.property(
      shardCount.chain((n) =>
        fc.tuple(
          fc.constant(n),
          fc.uniqueArray(fc.integer({ min: 0, max: n - 1 }), { minLength: 1 }),
        )
      ),
      hash64,
      ([n, held], h) => {
        const sel = shardSelector(held, n);
        assertEquals(serverMatches(sel, h), held.includes(shardOfHash(h, n)));
        // Each bound of the selector is a shard bound, and no two ranges touch (merged).
        const ranges = sel.split(" || ").map((p) =>
          [...p.matchAll(/'(0x[0-9a-f]+)'/g)].map((x) => x[1])
        );
        const bounds = new Set(shardBounds(n).map(boundHex));
        for (const [lo, hi] of ranges) assert(bounds.has(lo) && bounds.has(hi));
        for (let i = 1; i < ranges.length; i++) assert(ranges[i - 1][1] !== ranges[i][0]);
        // Every bound of a held shard appears on the apiserver's side of the comparison.
        for (const k of held) {
          assert(serverMatches(sel, shardBounds(n)[k]), `lower bound of shard ${k}`);
        }
      },
    ),
    { numRuns: 300 },
  );
});
