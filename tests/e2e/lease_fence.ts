/**
 * deploy/'s Lease-holder admission policy (lease_fence_policy.yaml; S23) installed for a test:
 * the same ValidatingAdmissionPolicy and binding, with only the names a test must make its own
 * changed, as an overlay would: the objects' names (so tests running side by side do not share
 * one), the ServiceAccount user in the match condition and the Lease in `paramRef`. The CEL
 * expressions, rules, actions and failure policy are deploy/'s, text for text.
 *
 * kube-apiserver 1.36 stops its informer of a built-in `paramKind` for good (per apiserver
 * process) once no binding names that kind for a moment, and later policies of that kind then find
 * no parameter: with `parameterNotFoundAction: Allow`, silently no fence (kubernetes/kubernetes
 * issue 130887; fixes proposed in PR 141015 and, for 1.36, PR 142150). Tests install and delete
 * policies one after another in one apiserver, so the first install also creates a keeper — a
 * policy and binding with the Lease as `paramKind` that match nothing and are never deleted —
 * which keeps the informer alive for the cluster's lifetime.
 *
 * @module
 */
import { parseAllDocuments } from "yaml";
import type { KubeObject } from "../../lib/kube/client.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { memberLabelValue } from "../../lib/runtime/shard_elector.ts";
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

/** Name of the keeper policy and binding (see the module doc). */
export const KEEPER_NAME = "e2e-lease-param-informer-keeper";

/** Creates the keeper policy and binding unless they exist (see the module doc). */
export async function ensureKeeper(): Promise<void> {
  const c = await admin();
  const exists = await c.get(VALIDATING_ADMISSION_POLICY_BINDINGS, KEEPER_NAME).then(
    () => true,
    (err) => {
      if (isNotFound(err)) return false;
      throw err;
    },
  );
  if (exists) return;
  const ignoreExists = (err: unknown) => {
    if ((err as { code?: number }).code !== 409) throw err;
  };
  await c.create(VALIDATING_ADMISSION_POLICIES, {
    apiVersion: "admissionregistration.k8s.io/v1",
    kind: "ValidatingAdmissionPolicy",
    metadata: { name: KEEPER_NAME },
    spec: {
      failurePolicy: "Ignore",
      paramKind: { apiVersion: "coordination.k8s.io/v1", kind: "Lease" },
      matchConstraints: {
        resourceRules: [{
          apiGroups: [""],
          apiVersions: ["v1"],
          resources: ["configmaps"],
          operations: ["DELETE"],
        }],
      },
      matchConditions: [{ name: "never", expression: "false" }],
      validations: [{ expression: "true" }],
    },
  } as KubeObject).catch(ignoreExists);
  await c.create(VALIDATING_ADMISSION_POLICY_BINDINGS, {
    apiVersion: "admissionregistration.k8s.io/v1",
    kind: "ValidatingAdmissionPolicyBinding",
    metadata: { name: KEEPER_NAME },
    spec: {
      policyName: KEEPER_NAME,
      validationActions: ["Deny"],
      paramRef: { name: KEEPER_NAME, namespace: "default", parameterNotFoundAction: "Allow" },
    },
  } as KubeObject).catch(ignoreExists);
}

/** A policy installed by {@link installLeaseFence}. */
export interface InstalledLeaseFence {
  /** Name of the ValidatingAdmissionPolicy (and of its binding). */
  name: string;
  /** Deletes the policy and the binding. */
  cleanup(): Promise<void>;
}

type Doc = KubeObject & { spec: Record<string, unknown>; status?: Record<string, unknown> };

/**
 * deploy/'s policy and binding in `file` (one of each), named `name` (the binding's policy too)
 * and matching the ServiceAccount user `user` instead of deploy/'s; the keeper is ensured first.
 * @throws Error when the file is not one policy and one binding, or its match conditions do not
 *   name deploy/'s user in exactly one
 */
async function deployPolicy(
  file: string,
  name: string,
  user: string,
): Promise<{ policy: Doc; binding: Doc }> {
  await ensureKeeper();
  const text = await Deno.readTextFile(`${REPO}/deploy/${file}`);
  const docs = parseAllDocuments(text).map((d) => d.toJS() as Doc);
  const policy = docs.find((d) => d.kind === "ValidatingAdmissionPolicy");
  const binding = docs.find((d) => d.kind === "ValidatingAdmissionPolicyBinding");
  if (!policy || !binding || docs.length !== 2) {
    throw new Error(`deploy/${file}: not one policy and binding`);
  }
  const conditions = policy.spec.matchConditions as { name: string; expression: string }[];
  const literal = JSON.stringify(DEPLOY_OPERATOR_USER);
  if (conditions.filter((m) => m.expression.includes(literal)).length !== 1) {
    throw new Error(`deploy/${file} does not match ${DEPLOY_OPERATOR_USER} in one condition`);
  }
  for (const m of conditions) m.expression = m.expression.replace(literal, JSON.stringify(user));
  policy.metadata = { ...policy.metadata, name };
  binding.metadata = { ...binding.metadata, name };
  binding.spec.policyName = name;
  return { policy, binding };
}

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
  const { policy, binding } = await deployPolicy("lease_fence_policy.yaml", name, user);
  binding.spec.paramRef = {
    ...(binding.spec.paramRef as Record<string, unknown>),
    name: leaseName,
    namespace: leaseNamespace,
  };
  return await created(policy, binding);
}

/**
 * Creates `policy` and `binding` (both named as the policy), waits until the apiserver has
 * type-checked the policy (its status), and returns how to delete both.
 * @throws Error (after deleting both) when its expressions do not type-check, or after 30 s
 */
async function created(policy: Doc, binding: Doc): Promise<InstalledLeaseFence> {
  const c = await admin();
  const name = policy.metadata!.name!;
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

/**
 * Installs deploy/shard_fence_policy.yaml (the per-shard Lease-holder policy; generated by
 * lib/appservice/fence_policy_gen.ts) for the ServiceAccount user `user` and the shard Leases of
 * election `electionId` in `leaseNamespace`, under the name `name`, as {@link installLeaseFence}
 * does for the one Lease: the user literal, the binding's `paramRef` label value and namespace, and
 * the objects' names change; the CEL is deploy/'s. Waits until the apiserver has checked its
 * expressions.
 * @throws Error when the expressions do not type-check, or deploy/'s file is not one policy and
 *   one binding with a `paramRef.selector`
 */
export async function installShardFence(
  name: string,
  user: string,
  leaseNamespace: string,
  electionId: string,
): Promise<InstalledLeaseFence> {
  const { policy, binding } = await deployPolicy("shard_fence_policy.yaml", name, user);
  const paramRef = binding.spec.paramRef as { selector?: { matchLabels?: Record<string, string> } };
  const labels = paramRef.selector?.matchLabels ?? {};
  if (Object.keys(labels).length !== 1) {
    throw new Error("deploy/'s binding: not one label selected");
  }
  binding.spec.paramRef = {
    ...paramRef,
    selector: { matchLabels: { [Object.keys(labels)[0]]: memberLabelValue(electionId) } },
    namespace: leaseNamespace,
  };
  return await created(policy, binding);
}
