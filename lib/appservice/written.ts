/**
 * What the AppService reconciler itself wrote, until its cache shows it (docs/scenarios.md S24):
 * a reconcile that follows the reconciler's own write starts from the object the apiserver
 * answered, not from the cached version that write replaced (docs/design/status.md).
 *
 * @module
 */
import type { ObjectMeta } from "kubernetes-types/meta/v1.d.ts";
import type { AppService } from "./schema.ts";
import { WrittenVersions } from "../runtime/written.ts";

export { WrittenVersions };

/**
 * `target` with the JSON merge patch `patch` applied (RFC 7386): members of `patch` replace those
 * of `target`, objects merge member by member, `null` removes, arrays and scalars replace whole.
 * Neither argument is changed.
 */
export function applyMergePatch(target: unknown, patch: unknown): unknown {
  if (typeof patch !== "object" || patch === null || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> =
    typeof target === "object" && target !== null && !Array.isArray(target)
      ? { ...target as Record<string, unknown> }
      : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else if (v !== undefined) out[k] = applyMergePatch(out[k], v);
  }
  return out;
}

/**
 * The AppService stored by a merge patch of its status subresource, from what the reconciler
 * knows without decoding the answer's object: `from` (the version the patch was made against,
 * its resourceVersion the patch's precondition, so the stored object was exactly `from`), the
 * status patch, and the metadata the apiserver answered (`response: "metadata"`; its
 * managedFields are left out, as the cache leaves them out). The status subresource changes only
 * the status and the metadata the apiserver sets (resourceVersion; the status has no defaults in
 * the CRD).
 */
export function statusWritten(
  from: AppService,
  statusPatch: Record<string, unknown>,
  answered: ObjectMeta,
): AppService {
  const { managedFields: _, ...metadata } = answered;
  return {
    ...from,
    metadata: metadata as AppService["metadata"],
    status: applyMergePatch(from.status, statusPatch) as AppService["status"],
  };
}
