/**
 * Operator identities for end-to-end tests: deploy/'s RBAC objects, and a ServiceAccount of its
 * own per operator replica (bound to deploy/'s ClusterRole, plus the Lease Role in a namespace of
 * the test's choosing) with a kubeconfig holding a token minted for it. One identity per replica
 * makes the audit log say which replica sent each request (`user.username`).
 *
 * @module
 */
import { parseAllDocuments, stringify } from "yaml";
import type { KubeObject } from "../../lib/kube/client.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { NAMESPACES, type ResourceType } from "../../lib/kube/resources.ts";
import { admin, cluster, REPO } from "./harness.ts";
import {
  CLUSTER_ROLE_BINDINGS,
  CLUSTER_ROLES,
  mintToken,
  RBAC,
  ROLE_BINDINGS,
  ROLES,
  SERVICE_ACCOUNTS,
} from "./resources.ts";

/** One RBAC rule. */
export interface Rule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

/** deploy/'s object kinds the tests apply, and their resource types. */
export const DEPLOY_KINDS: Record<string, ResourceType> = {
  Namespace: NAMESPACES,
  ServiceAccount: SERVICE_ACCOUNTS,
  ClusterRole: CLUSTER_ROLES,
  ClusterRoleBinding: CLUSTER_ROLE_BINDINGS,
  Role: ROLES,
  RoleBinding: ROLE_BINDINGS,
};

/** The Namespace, ServiceAccount and RBAC objects of deploy/, as written there. */
export async function deployObjects(): Promise<(KubeObject & { rules?: Rule[] })[]> {
  const out: (KubeObject & { rules?: Rule[] })[] = [];
  for (const f of ["namespace.yaml", "serviceaccount.yaml", "rbac.yaml"]) {
    const text = await Deno.readTextFile(`${REPO}/deploy/${f}`);
    for (const doc of parseAllDocuments(text)) {
      const o = doc.toJS() as KubeObject;
      if (o?.kind && DEPLOY_KINDS[o.kind]) out.push(o);
    }
  }
  return out;
}

/** Applies deploy/'s objects (server-side apply); returns them. */
export async function applyDeployRbac(): Promise<(KubeObject & { rules?: Rule[] })[]> {
  const c = await admin();
  const objects = await deployObjects();
  for (const o of objects) {
    await c.patch(DEPLOY_KINDS[o.kind!], o.metadata!.name!, o, {
      namespace: o.metadata!.namespace,
      type: "apply",
      fieldManager: "appservice-e2e",
      force: true,
    });
  }
  return objects;
}

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
 * keeps its Lease). The token (TokenRequest API) is valid for an hour. Needs
 * {@link applyDeployRbac} first. The kubeconfig is written into `dir`.
 */
export async function operatorIdentity(
  namespace: string,
  name: string,
  dir: string,
): Promise<OperatorIdentity> {
  const c = await admin();
  const objects = await deployObjects();
  const leaseRole = objects.find((o) => o.kind === "Role")!;
  const clusterRole = objects.find((o) => o.kind === "ClusterRole")!;
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
  const kubeconfig = await writeTokenKubeconfig(`${dir}/kubeconfig-${name}`, token, namespace);
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

/**
 * Writes a kubeconfig for the test cluster holding only `token` (the cluster CA as a file), with
 * context namespace `namespace`; returns `file`.
 */
export async function writeTokenKubeconfig(
  file: string,
  token: string,
  namespace: string,
): Promise<string> {
  const info = await cluster();
  await Deno.writeTextFile(
    file,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      "current-context": "sa",
      clusters: [{
        name: "local",
        cluster: { server: info.server, "certificate-authority": info.caCertFile },
      }],
      users: [{ name: "sa", user: { token } }],
      contexts: [{ name: "sa", context: { cluster: "local", user: "sa", namespace } }],
    }),
  );
  return file;
}
