/**
 * JSON merge patches (RFC 7386) computed from two states of an object: what controller-runtime's
 * `client.MergeFrom(before)` sends for an object changed in memory, in the manner of
 * `jsonpatch.CreateMergePatch` (github.com/evanphx/json-patch) that it calls.
 *
 * RFC 7386 in short: a patch is an object whose members replace the target's, objects are merged
 * member by member, `null` removes a member, and anything else — arrays included — replaces the
 * target's value whole. So an array that differs in any element is sent whole, and a member whose
 * value is `null` cannot be written (here `null` and `undefined` both count as absent).
 *
 * @module
 */

/** A JSON object (a decoded Kubernetes object, or a merge patch). */
export type JsonObject = Record<string, unknown>;

/** Whether `v` is a JSON object (not an array, not null). */
function isObject(v: unknown): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Whether `v` counts as absent: `undefined` or `null` (a merge patch's "remove"). */
function absent(v: unknown): v is undefined | null {
  return v === undefined || v === null;
}

/**
 * Whether `a` and `b` are equal as JSON: the same scalars, arrays of equal elements in the same
 * order, objects with the same members (member order and members that are `undefined` aside).
 */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    return a.every((x, i) => jsonEqual(x, b[i]));
  }
  if (!isObject(a) || !isObject(b)) return false;
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  for (const k of keys) {
    if (a[k] === undefined && b[k] === undefined) continue;
    if (!jsonEqual(a[k], b[k])) return false;
  }
  return true;
}

/**
 * The JSON merge patch (RFC 7386) that turns `before` into `after`: members of `after` that are
 * new or differ (objects recursively, everything else whole), and `null` for members of `before`
 * that `after` no longer has. Empty (`{}`) when the two are equal as JSON: then there is nothing to
 * send. Pure; the patch shares values with `after` (serialize it, do not change it).
 * @param before the object as read (e.g. from the apiserver)
 * @param after the object as it should be
 * @returns the patch, to send with `type: "merge"` (`application/merge-patch+json`)
 */
export function mergePatch(before: JsonObject, after: JsonObject): JsonObject {
  const patch: JsonObject = {};
  for (const k of Object.keys(before)) {
    if (!absent(before[k]) && absent(after[k])) patch[k] = null;
  }
  for (const k of Object.keys(after)) {
    const b = before[k];
    const a = after[k];
    if (absent(a)) continue;
    if (isObject(a) && isObject(b)) {
      const sub = mergePatch(b, a);
      if (Object.keys(sub).length > 0) patch[k] = sub;
    } else if (!jsonEqual(a, b)) {
      patch[k] = a;
    }
  }
  return patch;
}
