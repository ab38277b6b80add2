/**
 * Checked flag values of the benchmark commands (bench/run.ts, bench/watch.ts), which parse with
 * `node:util` parseArgs and take numbers and comma lists as strings.
 *
 * @module
 */

/**
 * `v` as an integer in `min..max`.
 * @throws Error naming `--name` and the range otherwise
 */
export function intFlag(name: string, v: string, min: number, max: number): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new Error(`--${name}: expected an integer in ${min}..${max}, got "${v}"`);
  }
  return n;
}

/**
 * The comma list `v` (empty items dropped), each item one of `allowed`, in the order given.
 * @throws Error naming `--name` and the first unknown item
 */
export function listFlag<T extends string>(name: string, v: string, allowed: readonly T[]): T[] {
  const items = v.split(",").filter(Boolean);
  for (const x of items) {
    if (!(allowed as readonly string[]).includes(x)) throw new Error(`--${name}: unknown "${x}"`);
  }
  return items as T[];
}
