/**
 * Minimal assertions for tests (JSR's std/assert is not reachable from this project's machines).
 * `node:assert/strict` supplies the deep comparison.
 *
 * @module
 */
import nodeAssert from "node:assert/strict";

/**
 * A failed assertion: {@link assert} throws this, {@link assertEquals} throws node's
 * `AssertionError`. Polling helpers (`waitFor`) rethrow both at once instead of retrying.
 */
export class AssertionError extends Error {
  override name = "AssertionError";
}

/** Whether `err` is a failed assertion (ours or `node:assert`'s), never a "not yet". */
export function isAssertionError(err: unknown): boolean {
  return err instanceof AssertionError || err instanceof nodeAssert.AssertionError;
}

/** Throws an {@link AssertionError} when `cond` is falsy. */
export function assert(cond: unknown, msg = "assertion failed"): asserts cond {
  if (!cond) throw new AssertionError(msg);
}

/** Deep strict equality. */
export function assertEquals<T>(actual: T, expected: T, msg?: string): void {
  if (msg === undefined) nodeAssert.deepStrictEqual(actual, expected);
  else nodeAssert.deepStrictEqual(actual, expected, msg);
}

/** Asserts that `fn` throws (or rejects) and that the message matches `pattern` if given. */
export async function assertRejects(
  fn: () => unknown,
  pattern?: RegExp,
): Promise<Error> {
  try {
    await fn();
  } catch (err) {
    if (pattern && !pattern.test(String((err as Error)?.message ?? err))) {
      throw new Error(`error "${(err as Error)?.message}" does not match ${pattern}`);
    }
    return err as Error;
  }
  throw new Error("expected an error, none was thrown");
}
