/**
 * The per-shard server-side fence's pure parts (lib/runtime/shard_fence_cel.ts): the 32-bit word
 * arithmetic the policy's CEL uses is 64-bit FNV-1a (property test against `fnv1a64`), the CEL
 * text has one step per character up to the longest namespace, each shard Lease's annotated range
 * is exactly its shard's, and the elector adds those labels and annotations without dropping
 * others (`withLeaseMetadata`). The apiserver's evaluation of the CEL is tested end to end
 * (tests/e2e/shard_server_fence_test.ts).
 */
import fc from "fast-check";
import { assert, assertEquals } from "../assert.ts";
import { fnv1a64, shardOfHash } from "../../lib/runtime/shards.ts";
import {
  HASH_FIRST_ANNOTATION,
  HASH_LAST_ANNOTATION,
  MAX_NAMESPACE_LENGTH,
  namespaceHashVariables,
  SHARD_LEASE_LABEL,
  shardLeaseMetadata,
  wordArithmeticHash,
} from "../../lib/runtime/shard_fence_cel.ts";
import { withLeaseMetadata } from "../../lib/runtime/leader.ts";

/** A namespace name: a DNS label (RFC 1123), 1..63 characters. */
const namespaceName = fc.stringMatching(/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/);

Deno.test("shard fence CEL: the word arithmetic is 64-bit FNV-1a for every namespace name", () => {
  fc.assert(
    fc.property(namespaceName, (ns) => wordArithmeticHash(ns) === fnv1a64(ns)),
    { numRuns: 20_000 },
  );
  assertEquals(wordArithmeticHash(""), fnv1a64(""));
  const longest = "z".repeat(MAX_NAMESPACE_LENGTH);
  assertEquals(wordArithmeticHash(longest), fnv1a64(longest));
});

Deno.test("shard fence CEL: one byte, xor and multiply step per character, then nsHash", () => {
  const vars = namespaceHashVariables("request.namespace");
  const names = vars.map((v) => v.name);
  assertEquals(names.slice(0, 4), ["ns", "codes", "xt", "h0"]);
  for (let i = 0; i < MAX_NAMESPACE_LENGTH; i++) {
    // Each step after the one it reads (a variable may only use those declared before it).
    assert(names.indexOf(`c${i}`) > names.indexOf(`h${i}`), `c${i}`);
    assert(names.indexOf(`x${i}`) > names.indexOf(`c${i}`), `x${i}`);
    assert(names.indexOf(`h${i + 1}`) > names.indexOf(`x${i}`), `h${i + 1}`);
  }
  assertEquals(names.at(-1), "nsHash");
  assertEquals(new Set(names).size, names.length, "names unique");
  assert(vars[3].expression === `[${fnv1a64("") >> 32n}, ${fnv1a64("") & 0xffffffffn}]`);
});

Deno.test("shard fence CEL: each shard Lease's range is its shard's, and they tile 0..2^64-1", () => {
  for (const n of [1, 2, 3, 6, 7, 256]) {
    let next = 0n;
    for (let k = 0; k < n; k++) {
      const m = shardLeaseMetadata("id", k, n);
      assertEquals(m.labels, { [SHARD_LEASE_LABEL]: "id" });
      const first = BigInt(m.annotations[HASH_FIRST_ANNOTATION]);
      const last = BigInt(m.annotations[HASH_LAST_ANNOTATION]);
      assertEquals(first, next, `shard ${k} of ${n} starts where ${k - 1} ended`);
      assert(first <= last);
      assertEquals(shardOfHash(first, n), k);
      assertEquals(shardOfHash(last, n), k);
      next = last + 1n;
    }
    assertEquals(next, 1n << 64n, `${n} shards end at 2^64`);
  }
  let threw = false;
  try {
    shardLeaseMetadata("id", 3, 3);
  } catch (err) {
    threw = err instanceof RangeError;
  }
  assert(threw, "a shard outside 0..n-1 is a RangeError");
});

Deno.test("withLeaseMetadata: adds the labels and annotations, keeps others, no copy when present", () => {
  const extra = { labels: { a: "1" }, annotations: { b: "2" } };
  const meta = { name: "l", labels: { other: "x" } };
  const out = withLeaseMetadata(meta, extra)!;
  assertEquals(out.labels, { other: "x", a: "1" });
  assertEquals(out.annotations, { b: "2" });
  assertEquals(out.name, "l");
  assert(withLeaseMetadata(out, extra) === out, "already there: the same object");
  assert(withLeaseMetadata(meta, undefined) === meta, "nothing to add");
  const changed = withLeaseMetadata({ ...out, annotations: { b: "old" } }, extra)!;
  assertEquals(changed.annotations, { b: "2" }, "a stale value is replaced");
});
