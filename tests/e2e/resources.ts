/**
 * Resource types only the end-to-end tests use (RBAC, service accounts, quotas), next to the
 * operator's own in lib/kube/resources.ts, and minting service account tokens.
 *
 * @module
 */
import { parseAllDocuments, stringify } from "yaml";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import { NAMESPACES, PODS, type ResourceType } from "../../lib/kube/resources.ts";
import { waitFor } from "./harness.ts";

/** A ResourceType from its group/version, kind, plural and scope. */
export const rt = (apiVersion: string, kind: string, plural: string, namespaced: boolean) =>
  ({ apiVersion, kind, plural, namespaced }) as ResourceType;

/** The RBAC group/version. */
export const RBAC = "rbac.authorization.k8s.io/v1";
/** core/v1 ServiceAccount. */
export const SERVICE_ACCOUNTS = rt("v1", "ServiceAccount", "serviceaccounts", true);
/** core/v1 ResourceQuota. */
export const RESOURCE_QUOTAS = rt("v1", "ResourceQuota", "resourcequotas", true);
/** rbac/v1 Role. */
export const ROLES = rt(RBAC, "Role", "roles", true);
/** rbac/v1 RoleBinding. */
export const ROLE_BINDINGS = rt(RBAC, "RoleBinding", "rolebindings", true);
/** rbac/v1 ClusterRole. */
export const CLUSTER_ROLES = rt(RBAC, "ClusterRole", "clusterroles", false);
/** rbac/v1 ClusterRoleBinding. */
export const CLUSTER_ROLE_BINDINGS = rt(RBAC, "ClusterRoleBinding", "clusterrolebindings", false);
/** admissionregistration/v1 ValidatingAdmissionPolicy. */
export const VALIDATING_ADMISSION_POLICIES = rt(
  "admissionregistration.k8s.io/v1",
  "ValidatingAdmissionPolicy",
  "validatingadmissionpolicies",
  false,
);
/** admissionregistration/v1 ValidatingAdmissionPolicyBinding. */
export const VALIDATING_ADMISSION_POLICY_BINDINGS = rt(
  "admissionregistration.k8s.io/v1",
  "ValidatingAdmissionPolicyBinding",
  "validatingadmissionpolicybindings",
  false,
);

/** MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in Kubernetes 1.36). */
export const MUTATING_POLICIES = rt(
  "admissionregistration.k8s.io/v1",
  "MutatingAdmissionPolicy",
  "mutatingadmissionpolicies",
  false,
);
/** MutatingAdmissionPolicyBinding. */
export const MUTATING_POLICY_BINDINGS = rt(
  "admissionregistration.k8s.io/v1",
  "MutatingAdmissionPolicyBinding",
  "mutatingadmissionpolicybindings",
  false,
);

/** What {@link mutationPolicy} changes, where, and how to see it in force. */
export interface MutationRule {
  /** Core (`""` group) resources it matches, e.g. `["pods"]`. */
  resources: string[];
  /** Operations it matches, e.g. `["CREATE"]`. */
  operations: string[];
  /** An optional CEL match condition on `object`. */
  matchCondition?: string;
  /** The ApplyConfiguration expression (CEL) of the mutation. */
  applyConfiguration: string;
  /** A Pod created with `dryRun=All` until `inForce` says the mutation shows on the answer. */
  probe: Pod;
  /** Whether the answered probe Pod shows the mutation. */
  inForce: (answered: Pod) => boolean;
}

/**
 * Creates a MutatingAdmissionPolicy `name` and its binding to namespace `ns` that apply `rule`,
 * and waits (30 s at most) until a dry-run create of the probe shows it in force. Resolves with a
 * function that removes both; removes them itself when the wait fails.
 * @throws Error when the policy is not in force within the bound
 */
export async function mutationPolicy(
  c: KubeClient,
  name: string,
  ns: string,
  rule: MutationRule,
): Promise<() => Promise<void>> {
  await c.create(MUTATING_POLICIES, {
    apiVersion: "admissionregistration.k8s.io/v1",
    kind: "MutatingAdmissionPolicy",
    metadata: { name },
    spec: {
      matchConstraints: {
        resourceRules: [{
          apiGroups: [""],
          apiVersions: ["v1"],
          operations: rule.operations,
          resources: rule.resources,
        }],
      },
      ...(rule.matchCondition
        ? { matchConditions: [{ name: "match", expression: rule.matchCondition }] }
        : {}),
      failurePolicy: "Fail",
      reinvocationPolicy: "Never",
      mutations: [{
        patchType: "ApplyConfiguration",
        applyConfiguration: { expression: rule.applyConfiguration },
      }],
    },
  } as KubeObject);
  await c.create(MUTATING_POLICY_BINDINGS, {
    apiVersion: "admissionregistration.k8s.io/v1",
    kind: "MutatingAdmissionPolicyBinding",
    metadata: { name },
    spec: {
      policyName: name,
      matchResources: {
        namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": ns } },
      },
    },
  } as KubeObject);
  const remove = async () => {
    await c.delete(MUTATING_POLICY_BINDINGS, name).catch(() => {});
    await c.delete(MUTATING_POLICIES, name).catch(() => {});
  };
  try {
    await waitFor(`mutating policy ${name} in force`, async () => {
      const p = await c.create<Pod>(PODS, {
        ...rule.probe,
        metadata: { ...rule.probe.metadata, namespace: ns },
      }, {
        dryRun: true,
      });
      return rule.inForce(p);
    }, 30_000);
  } catch (err) {
    await remove();
    throw err;
  }
  return remove;
}

/** What {@link denyPolicy} refuses. */
export interface DenyRule {
  /** v1 resource of `apiGroup`, e.g. `pods`. */
  resource: string;
  /** Its API group; default the core group (""). */
  apiGroup?: string;
  /** Operations, e.g. `["CREATE"]`. */
  operations: string[];
  /** CEL over `object`; the request is refused where it is false. */
  expression: string;
  /** The refusal's message. */
  message: string;
}

/**
 * Creates a ValidatingAdmissionPolicy `name` and its binding to namespace `ns` (Deny) refusing
 * what `rule` says; resolves with a function that removes both. A new policy takes a moment to be
 * in force: callers probe for it ({@link podRefused}, {@link dryRunRefused}).
 */
export async function denyPolicy(
  c: KubeClient,
  name: string,
  ns: string,
  rule: DenyRule,
): Promise<() => Promise<void>> {
  await c.create(VALIDATING_ADMISSION_POLICIES, {
    apiVersion: "admissionregistration.k8s.io/v1",
    kind: "ValidatingAdmissionPolicy",
    metadata: { name },
    spec: {
      failurePolicy: "Fail",
      matchConstraints: {
        resourceRules: [{
          apiGroups: [rule.apiGroup ?? ""],
          apiVersions: ["v1"],
          operations: rule.operations,
          resources: [rule.resource],
        }],
      },
      validations: [{ expression: rule.expression, message: rule.message }],
    },
  } as KubeObject);
  await c.create(VALIDATING_ADMISSION_POLICY_BINDINGS, {
    apiVersion: "admissionregistration.k8s.io/v1",
    kind: "ValidatingAdmissionPolicyBinding",
    metadata: { name },
    spec: {
      policyName: name,
      validationActions: ["Deny"],
      matchResources: { namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": ns } } },
    },
  } as KubeObject);
  return async () => {
    await c.delete(VALIDATING_ADMISSION_POLICY_BINDINGS, name).catch(() => {});
    await c.delete(VALIDATING_ADMISSION_POLICIES, name).catch(() => {});
  };
}

/**
 * Waits (30 s at most) until a dry-run create of a Pod running `image` in `ns` is refused: a
 * policy or quota is in force.
 */
export async function podRefused(c: KubeClient, ns: string, image: string): Promise<void> {
  await dryRunRefused(c, "the Pod refused (policy in force)", PODS, {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { generateName: "probe-", namespace: ns },
    spec: { containers: [{ name: "c", image }] },
  } as KubeObject);
}

/**
 * Waits (30 s at most) until a dry-run create of `obj` is refused: a new admission policy or
 * quota is in force for it. `what` names the wait in a timeout.
 */
export async function dryRunRefused(
  c: KubeClient,
  what: string,
  resource: ResourceType,
  obj: KubeObject,
): Promise<void> {
  await waitFor(
    what,
    async () => {
      try {
        await c.create(resource, obj, { dryRun: true });
        return false;
      } catch {
        return true;
      }
    },
    30_000,
    500,
  );
}

/** authentication/v1 SelfSubjectReview (create only). */
export const SELF_SUBJECT_REVIEWS = rt(
  "authentication.k8s.io/v1",
  "SelfSubjectReview",
  "selfsubjectreviews",
  false,
);

/**
 * Mints a bound token for ServiceAccount `ns/sa` (TokenRequest API: POST
 * .../serviceaccounts/NAME/token), valid `expirationSeconds` (the apiserver's default when unset).
 * @throws Error when the answer holds no token; ApiError from the apiserver
 */
export async function mintToken(
  c: KubeClient,
  ns: string,
  sa: string,
  expirationSeconds?: number,
): Promise<string> {
  const tr = await c.create<KubeObject & { status?: { token?: string } }>(
    // The subresource path, as a resource type.
    rt("v1", "TokenRequest", `serviceaccounts/${sa}/token`, true),
    {
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenRequest",
      spec: expirationSeconds === undefined ? {} : { expirationSeconds },
    } as KubeObject,
    { namespace: ns },
  );
  const token = tr.status?.token;
  if (!token) throw new Error(`no token minted for ${ns}/${sa}`);
  return token;
}

/** One rule of a Role or ClusterRole. */
export interface Rule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

/** deploy/'s objects that grant the operator its identity and permissions, by kind. */
const DEPLOY_RBAC_KINDS: Record<string, ResourceType> = {
  Namespace: NAMESPACES,
  ServiceAccount: SERVICE_ACCOUNTS,
  ClusterRole: CLUSTER_ROLES,
  ClusterRoleBinding: CLUSTER_ROLE_BINDINGS,
  Role: ROLES,
  RoleBinding: ROLE_BINDINGS,
};

/**
 * Applies deploy/'s Namespace, ServiceAccount and RBAC objects (namespace.yaml,
 * serviceaccount.yaml, rbac.yaml) with server-side apply (field manager `appservice-e2e`,
 * forced), as `kubectl apply -k deploy/` would create them; returns them as parsed.
 * @param repo the repository root
 */
export async function applyDeployRbac(
  c: KubeClient,
  repo: string,
): Promise<(KubeObject & { rules?: Rule[] })[]> {
  const out: (KubeObject & { rules?: Rule[] })[] = [];
  for (const f of ["namespace.yaml", "serviceaccount.yaml", "rbac.yaml"]) {
    const text = await Deno.readTextFile(`${repo}/deploy/${f}`);
    for (const doc of parseAllDocuments(text)) {
      const o = doc.toJS() as KubeObject;
      if (o?.kind && DEPLOY_RBAC_KINDS[o.kind]) out.push(o);
    }
  }
  for (const o of out) {
    await c.patch(DEPLOY_RBAC_KINDS[o.kind!], o.metadata!.name!, o, {
      namespace: o.metadata!.namespace,
      type: "apply",
      fieldManager: "appservice-e2e",
      force: true,
    });
  }
  return out;
}

/**
 * Writes a kubeconfig at `path` that authenticates to `server` (trusting the PEM file `caFile`)
 * with a bearer `token` only, its context in `namespace`: what a ServiceAccount's client sees.
 */
export async function writeTokenKubeconfig(
  path: string,
  server: string,
  caFile: string,
  token: string,
  namespace: string,
): Promise<void> {
  await Deno.writeTextFile(
    path,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      "current-context": "sa",
      clusters: [{ name: "local", cluster: { server, "certificate-authority": caFile } }],
      users: [{ name: "sa", user: { token } }],
      contexts: [{ name: "sa", context: { cluster: "local", user: "sa", namespace } }],
    }),
  );
}
