/**
 * The server-side fence of the shards (docs/design/sharding.md, "The apiserver's fence per
 * shard"): what a ValidatingAdmissionPolicy needs to refuse a write unless it comes from the
 * holder of the Lease of the shard that owns the write's namespace.
 *
 * The apiserver's CEL has no hash function (k8s.io/apiserver/pkg/cel/library at v0.36: authz, cidr,
 * format, ip, jsonpatch, lists, quantity, regex, semver, urls), so the policy computes the shard
 * hash itself: 64-bit FNV-1a of the namespace ({@link fnv1a64}) unrolled into one composition
 * variable per byte and step, over the namespace's at most 63 characters (a DNS label). CEL has no
 * bitwise operators and its integers are signed 64-bit (overflow is an error), so the hash is kept
 * as two 32-bit words `[hi, lo]` in `int`s:
 *
 * - xor with a byte `c` (0..127): only `lo`'s low byte changes, nibble by nibble from a table
 *   of the xor of two 4-bit values: `lo - lo % 256 + xt[lo % 16 * 16 + c % 16] + 16 * xt[lo / 16
 *   % 16 * 16 + c / 16]`;
 * - multiply by the FNV prime `2^40 + 435` modulo 2^64: `lo' = lo * 435 mod 2^32`,
 *   `hi' = (hi * 435 + floor(lo * 435 / 2^32) + (lo mod 2^24) * 2^8) mod 2^32` (every term below
 *   2^42);
 * - the byte of a character comes from a map of the characters a namespace name may hold (`a-z`,
 *   `0-9`, `-`).
 *
 * Each shard's Lease carries the first and last hash of its range as annotations (decimal, the
 * last one inclusive so 2^64 - 1 fits a CEL `uint`), and a label that the policy binding's
 * `paramRef.selector` selects: the apiserver then evaluates the policy once per shard Lease, and
 * each Lease judges the writes in its own range.
 *
 * @module
 */
import { fnv1a64, shardBounds } from "./shards.ts";

/** Label of every shard Lease of an election id (value: the id, as its membership label). */
export const SHARD_LEASE_LABEL = "sharding.apps.our-org.com/shard-of";
/** Annotation of a shard Lease: the first hash of its range (decimal, unsigned 64-bit). */
export const HASH_FIRST_ANNOTATION = "sharding.apps.our-org.com/hash-first";
/** Annotation of a shard Lease: the last hash of its range, inclusive (decimal, unsigned 64-bit). */
export const HASH_LAST_ANNOTATION = "sharding.apps.our-org.com/hash-last";

/** Longest namespace name (a DNS label, RFC 1123): the number of unrolled steps. */
export const MAX_NAMESPACE_LENGTH = 63;

/** Labels and annotations a shard Lease carries. */
export interface ShardLeaseMetadata {
  /** `{SHARD_LEASE_LABEL: labelValue}`. */
  labels: Record<string, string>;
  /** The range's first and last hash ({@link HASH_FIRST_ANNOTATION}, {@link HASH_LAST_ANNOTATION}). */
  annotations: Record<string, string>;
}

/**
 * The labels and annotations of shard `k` of `n`'s Lease: the election's label value
 * `labelValue` and the hashes `b_k` and `b_{k+1} - 1` ({@link shardBounds}).
 * @throws RangeError for `n` outside 1..256 or `k` outside 0..n-1
 */
export function shardLeaseMetadata(labelValue: string, k: number, n: number): ShardLeaseMetadata {
  const bounds = shardBounds(n);
  if (!Number.isInteger(k) || k < 0 || k >= n) {
    throw new RangeError(`shard ${k} is not one of 0..${n - 1}`);
  }
  return {
    labels: { [SHARD_LEASE_LABEL]: labelValue },
    annotations: {
      [HASH_FIRST_ANNOTATION]: bounds[k].toString(),
      [HASH_LAST_ANNOTATION]: (bounds[k + 1] - 1n).toString(),
    },
  };
}

/** A composition variable of a ValidatingAdmissionPolicy. */
export interface PolicyVariable {
  /** Its name (`variables.<name>`). */
  name: string;
  /** Its CEL expression. */
  expression: string;
}

/** The characters of a namespace name (a DNS label; `.` too) and their bytes, as a CEL map. */
const CODES = "{" +
  [..."-.0123456789abcdefghijklmnopqrstuvwxyz"].map((ch) => `"${ch}": ${ch.charCodeAt(0)}`)
    .join(", ") +
  "}";

/** The xor of two 4-bit values `a` and `b` is entry `a * 16 + b`. */
const NIBBLE_XOR = Array.from({ length: 256 }, (_, i) => (i >> 4) ^ (i & 15));

/** 2^32, the modulus of one word. */
const WORD = 4294967296;

/**
 * The composition variables that compute `variables.nsHash`: the 64-bit FNV-1a hash of
 * `namespaceExpr` (a CEL string expression, e.g. `request.namespace`) as a `uint`, equal to
 * {@link fnv1a64} for every namespace name (at most {@link MAX_NAMESPACE_LENGTH} characters of
 * `a-z`, `0-9`, `-`). Variables `ns`, `codes` (character to byte), `xt` (the xor of two 4-bit
 * values), then per character i: `c<i>` (its byte), `x<i>` (the low word after the xor) and
 * `h<i+1>` (`[hi, lo]` after i + 1 bytes, from `h0`, the offset basis), then `hash` (the `h<n>` of
 * the name's length n) and `nsHash`; in the order they must be declared. The apiserver evaluates a
 * variable only when an expression reads it, and `hash` reads only the `h` of the name's length
 * (a tree of conditionals on the length), so the steps of characters past the name's end are never
 * evaluated and need no guard of their own. A character outside the map is an evaluation
 * error (the policy's failurePolicy decides); a namespace name has none.
 */
export function namespaceHashVariables(namespaceExpr: string): PolicyVariable[] {
  const offset = fnv1a64("");
  const out: PolicyVariable[] = [
    { name: "ns", expression: namespaceExpr },
    { name: "codes", expression: CODES },
    { name: "xt", expression: `[${NIBBLE_XOR.join(", ")}]` },
    { name: "h0", expression: `[${offset >> 32n}, ${offset & 0xffffffffn}]` },
  ];
  for (let i = 0; i < MAX_NAMESPACE_LENGTH; i++) {
    const h = `variables.h${i}`;
    const c = `variables.c${i}`;
    const x = `variables.x${i}`;
    out.push({
      name: `c${i}`,
      expression: `variables.codes[variables.ns.substring(${i}, ${i + 1})]`,
    });
    out.push({
      name: `x${i}`,
      expression: `${h}[1] - ${h}[1] % 256 + variables.xt[${h}[1] % 16 * 16 + ${c} % 16] + ` +
        `16 * variables.xt[${h}[1] / 16 % 16 * 16 + ${c} / 16]`,
    });
    out.push({
      name: `h${i + 1}`,
      expression: `[(${h}[0] * 435 + ${x} * 435 / ${WORD} + ${x} % 16777216 * 256) % ${WORD}, ` +
        `${x} * 435 % ${WORD}]`,
    });
  }
  out.push({ name: "hash", expression: byLength(0, MAX_NAMESPACE_LENGTH) });
  out.push({
    name: "nsHash",
    expression: `uint(variables.hash[0]) * ${WORD}u + uint(variables.hash[1])`,
  });
  return out;
}

/**
 * A CEL expression that is `variables.h<n>` for the name's length n in `lo..hi`: a balanced tree
 * of conditionals on `size(variables.ns)` (depth log2 of the lengths), so only the steps of the
 * name's own characters are evaluated, not a chain through all of them.
 */
function byLength(lo: number, hi: number): string {
  if (lo === hi) return `variables.h${lo}`;
  const mid = Math.floor((lo + hi) / 2);
  return `(size(variables.ns) <= ${mid} ? ${byLength(lo, mid)} : ${byLength(mid + 1, hi)})`;
}

/**
 * The same steps as {@link namespaceHashVariables}, on numbers: the hash of `s` computed with the
 * policy's word arithmetic (for tests that the arithmetic is FNV-1a; the apiserver's evaluation of
 * the CEL text is tested end to end).
 */
export function wordArithmeticHash(s: string): bigint {
  const offset = fnv1a64("");
  let hi = Number(offset >> 32n);
  let lo = Number(offset & 0xffffffffn);
  for (const ch of s.slice(0, MAX_NAMESPACE_LENGTH)) {
    const c = ch.charCodeAt(0);
    const x = lo - lo % 256 + NIBBLE_XOR[lo % 16 * 16 + c % 16] +
      16 * NIBBLE_XOR[Math.floor(lo / 16) % 16 * 16 + Math.floor(c / 16)];
    hi = (hi * 435 + Math.floor(x * 435 / WORD) + (x % 16777216) * 256) % WORD;
    lo = (x * 435) % WORD;
  }
  return (BigInt(hi) << 32n) + BigInt(lo);
}
