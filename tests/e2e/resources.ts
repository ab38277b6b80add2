/**
 * Resource types only the end-to-end tests use (RBAC, service accounts, quotas), next to the
 * operator's own in lib/kube/resources.ts, and minting service account tokens.
 *
 * @module
 */
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import type { ResourceType } from "../../lib/kube/resources.ts";

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
