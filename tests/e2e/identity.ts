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
import { PODS } from "../../lib/kube/resources.ts";
import {
  CLUSTER_ROLE_BINDINGS,
  mintToken,
  RBAC,
  ROLE_BINDINGS,
  ROLES,
  rt,
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

/** A replica of {@link podBoundIdentities}: its ServiceAccount's user and its own Pod. */
export interface ReplicaIdentity {
  /** The ServiceAccount's user name (the same for every replica). */
  user: string;
  /** The Pod the token is bound to: `userInfo.extra["authentication.kubernetes.io/pod-name"]`. */
  podName: string;
  /** A kubeconfig holding {@link ReplicaIdentity.token}, its server as asked. */
  kubeconfig: string;
  /** A token bound to the Pod (TokenRequest with `boundObjectRef` kind Pod; an hour). */
  token: string;
}

/** The bound-token extra that names the Pod a ServiceAccount token was issued for. */
export const POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name";

/** The Pod name of an audit event's user (its bound token's extra); "" when none. */
export const podOf = (e: { user?: { extra?: Record<string, string[]> } }): string =>
  e.user?.extra?.[POD_NAME_EXTRA]?.[0] ?? "";

/**
 * A Pod `podName` in `namespace` running ServiceAccount `sa` (never started: a node selector no
 * Node matches keeps it Pending; it needs no more than to exist) and a token of `sa` bound to it
 * (TokenRequest with `boundObjectRef` kind Pod, an hour): the apiserver puts the Pod's name in
 * `userInfo.extra` of every request made with it, as for a replica of a Deployment.
 * @returns the token
 */
export async function podBoundToken(
  namespace: string,
  sa: string,
  podName: string,
): Promise<string> {
  const c = await admin();
  const pod = await c.create<KubeObject>(PODS, {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: podName, namespace },
    spec: {
      serviceAccountName: sa,
      // No node runs it: a selector no Node matches keeps it Pending.
      nodeSelector: { "e2e.apps.our-org.com/no-such-node": "true" },
      // Admitted by the restricted Pod Security level (deploy/'s namespace enforces it).
      securityContext: { runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } },
      containers: [{
        name: "operator",
        image: "appservice-operator:e2e",
        securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } },
      }],
    },
  } as KubeObject);
  return await tokenBoundToPod(namespace, sa, pod);
}

/**
 * A token of ServiceAccount `namespace/sa` bound to `pod` (TokenRequest with `boundObjectRef`
 * kind Pod, an hour): valid while that Pod exists, and the apiserver puts the Pod's name in
 * `userInfo.extra` of every request made with it.
 * @throws Error when the apiserver returns no token
 */
export async function tokenBoundToPod(
  namespace: string,
  sa: string,
  pod: KubeObject,
): Promise<string> {
  const c = await admin();
  const tr = await c.create<KubeObject & { status?: { token?: string } }>(
    rt("v1", "TokenRequest", `serviceaccounts/${sa}/token`, true),
    {
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenRequest",
      spec: {
        expirationSeconds: 3600,
        boundObjectRef: {
          apiVersion: "v1",
          kind: "Pod",
          name: pod.metadata!.name,
          uid: pod.metadata!.uid,
        },
      },
    } as KubeObject,
    { namespace },
  );
  const token = tr.status?.token;
  if (!token) {
    throw new Error(`no token minted for ${namespace}/${sa} bound to ${pod.metadata?.name}`);
  }
  return token;
}

/**
 * Replicas of one ServiceAccount told apart as in a Deployment: the ServiceAccount `name` in
 * `namespace` with deploy/'s permissions ({@link operatorIdentity}), one Pod object per name in
 * `pods` (running that ServiceAccount; never started: a node selector no Node matches keeps it
 * Pending, and it needs no more than to exist), and per Pod a token bound to it, so
 * the apiserver puts the Pod's name in `userInfo.extra` (what deploy/'s Lease-holder admission
 * policy compares with the Lease). Each replica's kubeconfig points at `servers[i]` (default the
 * cluster's server), e.g. a fault proxy of its own.
 * @returns the ServiceAccount's identity (for cleanup) and the replicas, in the order of `pods`
 */
export async function podBoundIdentities(
  deployObjects: (KubeObject & { rules?: Rule[] })[],
  namespace: string,
  name: string,
  pods: string[],
  dir: string,
  servers: string[] = [],
): Promise<{ account: OperatorIdentity; replicas: ReplicaIdentity[] }> {
  const info = await cluster();
  const account = await operatorIdentity(deployObjects, namespace, name, dir);
  const replicas: ReplicaIdentity[] = [];
  for (const [i, podName] of pods.entries()) {
    const token = await podBoundToken(namespace, name, podName);
    const kubeconfig = `${dir}/kubeconfig-${name}-${podName}`;
    await writeTokenKubeconfig(
      kubeconfig,
      servers[i] ?? info.server,
      info.caCertFile,
      token,
      namespace,
    );
    replicas.push({ user: account.user, podName, kubeconfig, token });
  }
  return { account, replicas };
}
