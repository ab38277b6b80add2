/**
 * deploy/'s Lease-holder admission policy (lease_fence_policy.yaml; S23) installed for a test:
 * the same ValidatingAdmissionPolicy and binding, with only the names a test must make its own
 * changed, as an overlay would: the objects' names (so tests running side by side do not share
 * one), the ServiceAccount user in the match condition and the Lease in `paramRef`. The CEL
 * expressions, rules, actions and failure policy are deploy/'s, text for text.
 *
 * @module
 */
import { parseAllDocuments } from "yaml";
import type { KubeObject } from "../../lib/kube/client.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { admin, REPO, sleep } from "./harness.ts";
import {
  VALIDATING_ADMISSION_POLICIES,
  VALIDATING_ADMISSION_POLICY_BINDINGS,
} from "./resources.ts";

/** The ServiceAccount user deploy/'s policy matches. */
export const DEPLOY_OPERATOR_USER = "system:serviceaccount:appservice-system:appservice-operator";
/** The audit annotation of a policy's refusal when its binding has the Audit action. */
export const VALIDATION_FAILURE_ANNOTATION =
  "validation.policy.admission.k8s.io/validation_failure";

/** A policy installed by {@link installLeaseFence}. */
export interface InstalledLeaseFence {
  /** Name of the ValidatingAdmissionPolicy (and of its binding). */
  name: string;
  /** Deletes the policy and the binding. */
  cleanup(): Promise<void>;
}

type Doc = KubeObject & { spec: Record<string, unknown>; status?: Record<string, unknown> };

/**
 * Installs deploy/lease_fence_policy.yaml for the ServiceAccount user `user` and the Lease
 * `leaseNamespace/leaseName`, under the name `name`, and waits until the apiserver has checked
 * its expressions.
 * @throws Error when the policy's expressions do not type-check (status.typeChecking), or
 *   deploy/'s file does not have the one user literal and the objects this expects
 */
export async function installLeaseFence(
  name: string,
  user: string,
  leaseNamespace: string,
  leaseName: string,
): Promise<InstalledLeaseFence> {
  const c = await admin();
  const text = await Deno.readTextFile(`${REPO}/deploy/lease_fence_policy.yaml`);
  const docs = parseAllDocuments(text).map((d) => d.toJS() as Doc);
  const policy = docs.find((d) => d.kind === "ValidatingAdmissionPolicy");
  const binding = docs.find((d) => d.kind === "ValidatingAdmissionPolicyBinding");
  if (!policy || !binding || docs.length !== 2) {
    throw new Error("deploy/: not one policy and binding");
  }
  const conditions = policy.spec.matchConditions as { name: string; expression: string }[];
  const literal = JSON.stringify(DEPLOY_OPERATOR_USER);
  if (conditions.filter((m) => m.expression.includes(literal)).length !== 1) {
    throw new Error(`deploy/'s policy does not match ${DEPLOY_OPERATOR_USER} in one condition`);
  }
  for (const m of conditions) m.expression = m.expression.replace(literal, JSON.stringify(user));
  policy.metadata = { ...policy.metadata, name };
  binding.metadata = { ...binding.metadata, name };
  binding.spec.policyName = name;
  binding.spec.paramRef = {
    ...(binding.spec.paramRef as Record<string, unknown>),
    name: leaseName,
    namespace: leaseNamespace,
  };
  await c.create(VALIDATING_ADMISSION_POLICIES, policy);
  await c.create(VALIDATING_ADMISSION_POLICY_BINDINGS, binding);
  const cleanup = async () => {
    for (const rtype of [VALIDATING_ADMISSION_POLICY_BINDINGS, VALIDATING_ADMISSION_POLICIES]) {
      await c.delete(rtype, name).catch((err) => {
        if (!isNotFound(err)) throw err;
      });
    }
  };
  // The apiserver type-checks the expressions once it has seen the policy (status).
  for (let i = 0; i < 300; i++) {
    const p = await c.get<Doc>(VALIDATING_ADMISSION_POLICIES, name);
    const st = p.status as
      | { observedGeneration?: number; typeChecking?: { expressionWarnings?: unknown[] } }
      | undefined;
    if (st && st.observedGeneration === p.metadata?.generation) {
      const warnings = st.typeChecking?.expressionWarnings ?? [];
      if (warnings.length > 0) {
        await cleanup();
        throw new Error(`policy expressions do not type-check: ${JSON.stringify(warnings)}`);
      }
      return { name, cleanup };
    }
    await sleep(100);
  }
  await cleanup();
  throw new Error(`policy ${name}: never type-checked`);
}
