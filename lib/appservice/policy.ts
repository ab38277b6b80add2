/**
 * Whether deploy/finalizer_policy.yaml is in force: the MutatingAdmissionPolicy and binding that
 * make the apiserver add {@link FINALIZER} to every AppService at create
 * (admissionregistration.k8s.io/v1, Kubernetes 1.36+, KEP-3962). The operator adds the finalizer
 * itself whenever it is missing, policy or not; this only tells the user, in one start-up log
 * line, which of the two puts it there (docs/operations.md, "Finalizer at create").
 *
 * @module
 */
import type { KubeClient, KubeObject } from "../kube/client.ts";
import { isForbidden, isNotFound } from "../kube/errors.ts";
import type { ResourceType } from "../kube/resources.ts";
import type { Logger } from "../runtime/log.ts";
import { FINALIZER } from "./api.ts";

/** Name of deploy/'s MutatingAdmissionPolicy and of its binding. */
export const FINALIZER_POLICY_NAME = "appservice-operator-finalizer";

/** admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (cluster-scoped). */
export const MUTATING_ADMISSION_POLICIES: ResourceType = {
  apiVersion: "admissionregistration.k8s.io/v1",
  kind: "MutatingAdmissionPolicy",
  plural: "mutatingadmissionpolicies",
  namespaced: false,
};

/** admissionregistration.k8s.io/v1 MutatingAdmissionPolicyBinding (cluster-scoped). */
export const MUTATING_ADMISSION_POLICY_BINDINGS: ResourceType = {
  apiVersion: "admissionregistration.k8s.io/v1",
  kind: "MutatingAdmissionPolicyBinding",
  plural: "mutatingadmissionpolicybindings",
  namespaced: false,
};

/**
 * What {@link finalizerPolicyState} found:
 * - `yes`: the policy and a binding of it exist, and the policy's mutations name the finalizer;
 *   `scoped` when the binding limits what it matches (`matchResources`), so AppServices outside
 *   it get the finalizer from the operator;
 * - `no`: one of them is missing (`reason` says which), or the cluster does not serve the API;
 * - `unknown`: they could not be read (`reason`: forbidden by RBAC, or the request failed).
 */
export type FinalizerPolicyState =
  | { inForce: "yes"; scoped: boolean }
  | { inForce: "no" | "unknown"; reason: string };

type Policy = KubeObject & { spec?: { mutations?: unknown[] } };
type Binding = KubeObject & { spec?: { policyName?: string; matchResources?: unknown } };

/**
 * Reads deploy/'s policy and binding by name ({@link FINALIZER_POLICY_NAME}; RBAC `get` on both
 * resources, deploy/rbac.yaml) and says whether they are in force. Never throws: a refusal or a
 * failed request is the `unknown` state with its reason.
 */
export async function finalizerPolicyState(
  client: KubeClient,
  signal?: AbortSignal,
): Promise<FinalizerPolicyState> {
  const read = async <T extends KubeObject>(rt: ResourceType): Promise<T | string> => {
    try {
      return await client.get<T>(rt, FINALIZER_POLICY_NAME, { signal });
    } catch (err) {
      if (isNotFound(err)) return `no ${rt.kind} ${FINALIZER_POLICY_NAME}`;
      if (isForbidden(err)) return `forbidden: get ${rt.plural} (RBAC, deploy/rbac.yaml)`;
      return `${rt.kind} ${FINALIZER_POLICY_NAME} not read: ${(err as Error).message ?? err}`;
    }
  };
  const [policy, binding] = await Promise.all([
    read<Policy>(MUTATING_ADMISSION_POLICIES),
    read<Binding>(MUTATING_ADMISSION_POLICY_BINDINGS),
  ]);
  if (typeof policy === "string" || typeof binding === "string") {
    const reasons = [policy, binding].filter((r): r is string => typeof r === "string");
    const unknown = reasons.some((r) => !r.startsWith("no "));
    return { inForce: unknown ? "unknown" : "no", reason: reasons.join("; ") };
  }
  if (binding.spec?.policyName !== FINALIZER_POLICY_NAME) {
    return {
      inForce: "no",
      reason: `binding ${FINALIZER_POLICY_NAME} binds policy '${binding.spec?.policyName ?? ""}'`,
    };
  }
  if (!JSON.stringify(policy.spec?.mutations ?? []).includes(FINALIZER)) {
    return { inForce: "no", reason: `policy ${FINALIZER_POLICY_NAME} does not add ${FINALIZER}` };
  }
  return { inForce: "yes", scoped: binding.spec?.matchResources !== undefined };
}

/**
 * Logs {@link finalizerPolicyState} as one info line, "Finalizer admission policy", with
 * `inForce` (`yes`, `no`, `unknown`) and `scoped` or `reason`. Never throws.
 */
export async function logFinalizerPolicy(
  client: KubeClient,
  logger: Logger,
  signal?: AbortSignal,
): Promise<void> {
  const state = await finalizerPolicyState(client, signal);
  if (signal?.aborted) return;
  logger.info("Finalizer admission policy", {
    policy: FINALIZER_POLICY_NAME,
    ...state,
    finalizerAddedBy: state.inForce === "yes"
      ? (state.scoped ? "apiserver where bound, else operator" : "apiserver")
      : "operator",
  });
}
