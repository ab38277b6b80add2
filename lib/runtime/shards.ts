/**
 * Shards of the namespaces (docs/design/sharding.md): the hash, the ranges and the apiserver's
 * shard selector text. An object belongs to the shard of its namespace; `n` shards split the
 * 64-bit hash space into `n` ranges of (nearly) equal size.
 *
 * - Hash: 64-bit FNV-1a of the UTF-8 namespace name, as `k8s.io/apimachinery/pkg/sharding`
 *   `HashField` (Go's `hash/fnv` `New64a`).
 * - Bounds: `b_k = floor(k * 2^64 / n)` for k = 0..n (`b_n = 2^64`); shard k holds the hashes h
 *   with `b_k <= h < b_{k+1}`.
 * - Selector: `shardRange(object.metadata.namespace, '0x<lower>', '0x<upper>')` per run of
 *   adjacent held shards, joined with ` || ` (the `ListOptions.shardSelector` of the
 *   `ShardedListAndWatch` feature gate). Bounds are written as 16 lowercase hex digits (the
 *   upper bound of the last shard `0x10000000000000000`): the apiserver compares the hash's
 *   fixed-width hex text with the bounds by length first, then as text (`sharding.HexLess`), so
 *   a bound must have the hash's width.
 *
 * @module
 */

/** Most shards `--shards` allows. */
export const MAX_SHARDS = 256;
/** The field the shard selector hashes. */
export const SHARD_KEY_FIELD = "object.metadata.namespace";

const FNV64_OFFSET = 0xcbf29ce484222325n;
const FNV64_PRIME = 0x100000001b3n;
const MASK64 = (1n << 64n) - 1n;
const encoder = new TextEncoder();

/**
 * 64-bit FNV-1a of the UTF-8 bytes of `s` (Go `hash/fnv.New64a`), as an unsigned bigint in
 * [0, 2^64).
 */
export function fnv1a64(s: string): bigint {
  let h = FNV64_OFFSET;
  for (const b of encoder.encode(s)) {
    h ^= BigInt(b);
    h = (h * FNV64_PRIME) & MASK64;
  }
  return h;
}

/**
 * Throws unless `n` is a whole number of shards in 1..{@link MAX_SHARDS}.
 * @throws RangeError naming the bad value
 */
export function checkShardCount(n: number): void {
  if (!Number.isInteger(n) || n < 1 || n > MAX_SHARDS) {
    throw new RangeError(`shards must be a whole number from 1 to ${MAX_SHARDS}, not ${n}`);
  }
}

/**
 * The `n + 1` bounds of `n` shards: `b_k = floor(k * 2^64 / n)`, `b_0 = 0`, `b_n = 2^64`.
 * @throws RangeError for `n` outside 1..{@link MAX_SHARDS}
 */
export function shardBounds(n: number): bigint[] {
  checkShardCount(n);
  const out: bigint[] = [];
  for (let k = 0; k <= n; k++) out.push((BigInt(k) << 64n) / BigInt(n));
  return out;
}

/** The shard (0..n-1) of a 64-bit hash `h` among `n` shards: the k with `b_k <= h < b_{k+1}`. */
export function shardOfHash(h: bigint, n: number): number {
  // First guess from the quotient, then correct for the floor of the bounds (at most one step).
  let k = Number((h * BigInt(n)) >> 64n);
  const bound = (i: number) => (BigInt(i) << 64n) / BigInt(n);
  while (k > 0 && h < bound(k)) k--;
  while (k < n - 1 && h >= bound(k + 1)) k++;
  return k;
}

/**
 * The shard (0..n-1) of an object in `namespace` among `n` shards.
 * @throws RangeError for `n` outside 1..{@link MAX_SHARDS}
 */
export function shardOf(namespace: string, n: number): number {
  checkShardCount(n);
  return shardOfHash(fnv1a64(namespace), n);
}

/** A bound as the selector writes it: `0x` and 16 lowercase hex digits (17 for 2^64). */
export function boundHex(b: bigint): string {
  return "0x" + b.toString(16).padStart(16, "0");
}

/**
 * The apiserver's shard selector of the held `shards` among `n`: one `shardRange` per run of
 * adjacent held shards (merged), in ascending order, joined with ` || `; "" when none is held.
 * @throws RangeError for `n` outside 1..{@link MAX_SHARDS} or a shard outside 0..n-1
 */
export function shardSelector(shards: readonly number[], n: number): string {
  const bounds = shardBounds(n);
  const held = [...new Set(shards)].sort((a, b) => a - b);
  for (const k of held) {
    if (!Number.isInteger(k) || k < 0 || k >= n) {
      throw new RangeError(`shard ${k} is not one of 0..${n - 1}`);
    }
  }
  const parts: string[] = [];
  for (let i = 0; i < held.length;) {
    let j = i;
    while (j + 1 < held.length && held[j + 1] === held[j] + 1) j++;
    const lo = boundHex(bounds[held[i]]);
    const hi = boundHex(bounds[held[j] + 1]);
    parts.push(`shardRange(${SHARD_KEY_FIELD}, '${lo}', '${hi}')`);
    i = j + 1;
  }
  return parts.join(" || ");
}

/**
 * The namespace a request path names, or undefined for a cluster-scoped path:
 * `/api/v1/namespaces/<ns>/...` and `/apis/<group>/<version>/namespaces/<ns>/...` (a resource
 * below the namespace; the Namespace object itself, `/api/v1/namespaces/<ns>`, is cluster-scoped).
 */
export function namespaceOfPath(path: string): string | undefined {
  const m = /^\/(?:api\/[^/]+|apis\/[^/]+\/[^/]+)\/namespaces\/([^/?]+)\/[^?]/.exec(path);
  return m ? decodeURIComponent(m[1]) : undefined;
}
