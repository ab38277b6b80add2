/**
 * Operator identities for end-to-end tests: a ServiceAccount of its own per operator replica,
 * bound to deploy/'s ClusterRole (through a ClusterRoleBinding of its own) and to deploy/'s Lease
 * Role copied into a namespace of the test's choosing, with a kubeconfig holding a token minted
 * for it. One identity per replica makes the audit log say which replica sent each request
 * (`user.username`).
 *
 * @module
 */
import type { KubeObject } from "../../lib/kube/client.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { admin, cluster } from "./harness.ts";
import {
  CLUSTER_ROLE_BINDINGS,
  mintToken,
  RBAC,
  ROLE_BINDINGS,
  ROLES,
  type Rule,
  SERVICE_ACCOUNTS,
  writeTokenKubeconfig,
} from "./resources.ts";

/** An operator identity made by {@link operatorIdentity}. */
export interface OperatorIdentity {
  /** The user name the apiserver (and its audit log) knows it by. */
  user: string;
  /** ServiceAccount namespace and name. */
  namespace: string;
  name: string;
  /** A kubeconfig holding {@link OperatorIdentity.token}; context namespace `namespace`. */
  kubeconfig: string;
  /** A bound token of the ServiceAccount (an hour). */
  token: string;
  /** Removes the cluster-scoped binding (namespaced objects go with the namespace). */
  cleanup(): Promise<void>;
}

/**
 * A ServiceAccount `name` in `namespace` with deploy/'s permissions: its ClusterRole through a
 * ClusterRoleBinding of its own, and deploy/'s Lease Role copied into `namespace` (where the test
 * keeps its Lease). The token (TokenRequest API) is valid for an hour; the kubeconfig is written
 * into `dir`.
 * @param deployObjects what `applyDeployRbac` (resources.ts) applied
 */
export async function operatorIdentity(
  deployObjects: (KubeObject & { rules?: Rule[] })[],
  namespace: string,
  name: string,
  dir: string,
): Promise<OperatorIdentity> {
  const c = await admin();
  const info = await cluster();
  const leaseRole = deployObjects.find((o) => o.kind === "Role")!;
  const clusterRole = deployObjects.find((o) => o.kind === "ClusterRole")!;
  await c.create(SERVICE_ACCOUNTS, {
    apiVersion: "v1",
    kind: "ServiceAccount",
    metadata: { name, namespace },
  } as KubeObject);
  const roleName = leaseRole.metadata!.name!;
  await c.patch(ROLES, roleName, { ...leaseRole, metadata: { name: roleName, namespace } }, {
    namespace,
    type: "apply",
    fieldManager: "appservice-e2e",
    force: true,
  });
  const subjects = [{ kind: "ServiceAccount", name, namespace }];
  await c.create(ROLE_BINDINGS, {
    apiVersion: RBAC,
    kind: "RoleBinding",
    metadata: { name: `${name}-lease`, namespace },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: roleName },
    subjects,
  } as KubeObject);
  const bindingName = `e2e-${namespace}-${name}`;
  await c.create(CLUSTER_ROLE_BINDINGS, {
    apiVersion: RBAC,
    kind: "ClusterRoleBinding",
    metadata: { name: bindingName },
    roleRef: {
      apiGroup: "rbac.authorization.k8s.io",
      kind: "ClusterRole",
      name: clusterRole.metadata!.name!,
    },
    subjects,
  } as KubeObject);
  const token = await mintToken(c, namespace, name, 3600);
  const kubeconfig = `${dir}/kubeconfig-${name}`;
  await writeTokenKubeconfig(kubeconfig, info.server, info.caCertFile, token, namespace);
  return {
    user: `system:serviceaccount:${namespace}:${name}`,
    namespace,
    name,
    kubeconfig,
    token,
    cleanup: async () => {
      await c.delete(CLUSTER_ROLE_BINDINGS, bindingName).catch((err) => {
        if (!isNotFound(err)) throw err;
      });
    },
  };
}
