/**
 * deploy/finalizer_policy.yaml (the MutatingAdmissionPolicy that adds the operator's finalizer to
 * every AppService at create) installed on the local control plane as deploy/ installs it: the
 * same policy and binding, under deploy/'s names, applied with server-side apply. The only change
 * a caller may make is the binding's `matchResources.namespaceSelector`, so that one cluster can
 * hold namespaces with and without the policy: the end-to-end tests leave it out of namespaces
 * labelled {@link WITHOUT_POLICY_LABEL}, the benchmark binds it only to its own operator's
 * namespaces (its controller-runtime peer runs without it, as a kubebuilder operator does).
 *
 * Shared by tests/e2e and bench/ (which does not import the e2e harness).
 *
 * @module
 */
import { parseAllDocuments } from "yaml";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import { APPSERVICES, FINALIZER } from "../../lib/appservice/api.ts";
import {
  FINALIZER_POLICY_NAME,
  MUTATING_ADMISSION_POLICIES,
  MUTATING_ADMISSION_POLICY_BINDINGS,
} from "../../lib/appservice/policy.ts";
import { REPO } from "../../lib/testing/config.ts";

/** Label of a namespace the tests' binding leaves out (value {@link WITHOUT_POLICY_VALUE}). */
export const WITHOUT_POLICY_LABEL = "e2e.our-org.com/finalizer-policy";
/** Value of {@link WITHOUT_POLICY_LABEL} that leaves a namespace out of the policy. */
export const WITHOUT_POLICY_VALUE = "off";

/** A label selector (metav1.LabelSelector). */
export interface LabelSelector {
  /** Labels that must be present with these values. */
  matchLabels?: Record<string, string>;
  /** Requirements (`In`, `NotIn`, `Exists`, `DoesNotExist`). */
  matchExpressions?: { key: string; operator: string; values?: string[] }[];
}

/** Options of {@link applyFinalizerPolicy}. */
export interface ApplyFinalizerPolicyOptions {
  /** Field manager of the server-side applies. */
  fieldManager: string;
  /** The binding's `matchResources.namespaceSelector`; unset: every namespace, as deploy/'s. */
  namespaceSelector?: LabelSelector;
  /**
   * An existing namespace the binding matches: dry-run creates of an AppService there show when
   * the apiserver applies the policy.
   */
  probeNamespace: string;
  /** How long to wait until the policy is in force (ms); default 30 s. */
  timeoutMs?: number;
}

/** deploy/finalizer_policy.yaml's policy and binding, parsed. */
export async function readFinalizerPolicy(): Promise<
  {
    policy: KubeObject & { spec: Record<string, unknown> };
    binding: KubeObject & { spec: Record<string, unknown> };
  }
> {
  const text = await Deno.readTextFile(`${REPO}/deploy/finalizer_policy.yaml`);
  const docs = parseAllDocuments(text).map((d) =>
    d.toJS() as KubeObject & { spec: Record<string, unknown> }
  );
  const policy = docs.find((d) => d.kind === MUTATING_ADMISSION_POLICIES.kind);
  const binding = docs.find((d) => d.kind === MUTATING_ADMISSION_POLICY_BINDINGS.kind);
  if (
    !policy || !binding || docs.length !== 2 ||
    policy.metadata?.name !== FINALIZER_POLICY_NAME ||
    binding.metadata?.name !== FINALIZER_POLICY_NAME
  ) {
    throw new Error(
      `deploy/finalizer_policy.yaml: not one policy and binding named ${FINALIZER_POLICY_NAME}`,
    );
  }
  return { policy, binding };
}

/**
 * Applies deploy/'s policy and binding (server-side apply, forced), the binding with
 * `o.namespaceSelector` when given, and waits until a dry-run create of an AppService in
 * `o.probeNamespace` comes back with the finalizer: the apiserver's admission plugin has loaded
 * both (it reads them through an informer, so there is a short lag after the apply).
 * @throws Error when the policy is not in force within the timeout, or deploy/'s file is not
 *   one policy and one binding under deploy/'s name
 */
export async function applyFinalizerPolicy(
  c: KubeClient,
  o: ApplyFinalizerPolicyOptions,
): Promise<void> {
  const { policy, binding } = await readFinalizerPolicy();
  if (o.namespaceSelector) {
    binding.spec = { ...binding.spec, matchResources: { namespaceSelector: o.namespaceSelector } };
  }
  const apply = { type: "apply" as const, fieldManager: o.fieldManager, force: true };
  await c.patch(MUTATING_ADMISSION_POLICIES, FINALIZER_POLICY_NAME, policy, apply);
  await c.patch(MUTATING_ADMISSION_POLICY_BINDINGS, FINALIZER_POLICY_NAME, binding, apply);
  await waitFinalizerPolicy(c, o.probeNamespace, o.fieldManager, o.timeoutMs);
}

/**
 * Waits until a dry-run create of an AppService in `namespace` comes back with the finalizer:
 * the finalizer policy is in force there and the apiserver's admission plugin knows the
 * AppService kind. Right after the CRD is created, and after a reinstall that re-created it, a
 * create answers 503 ("Resource kind ... not found. There can be a delay between when
 * CustomResourceDefinitions are created and when they are available.") for a few seconds although
 * the CRD is Established and reads are served; a 404 (kind not served yet) is waited out too.
 * @param timeoutMs how long to wait (ms); default 30 s
 * @throws Error when not in force within the timeout, or any other error of the dry run
 */
export async function waitFinalizerPolicy(
  c: KubeClient,
  namespace: string,
  fieldManager: string,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  for (let i = 0; i < 1_000; i++) {
    const got = await c.create<KubeObject>(APPSERVICES, {
      apiVersion: APPSERVICES.apiVersion,
      kind: APPSERVICES.kind,
      metadata: { name: "finalizer-policy-probe", namespace },
      spec: { image: "registry.local/probe:1", replicas: 1 },
    } as KubeObject, { namespace, dryRun: true, fieldManager })
      .catch((err) => {
        const code = (err as { code?: number }).code;
        if (code !== 503 && code !== 404) throw err;
        return { metadata: {}, error: (err as Error).message } as KubeObject & { error: string };
      });
    if (got.metadata?.finalizers?.includes(FINALIZER)) return;
    last = (got as { error?: string }).error ?? JSON.stringify(got.metadata?.finalizers ?? []);
    if (Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(
    `finalizer policy not in force in ${namespace} after ${timeoutMs} ms ` +
      `(the last dry-run create's finalizers or error: ${last})`,
  );
}
