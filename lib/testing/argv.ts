/**
 * Command lines of the control plane's components (etcd, kube-apiserver, controller-manager, scheduler, kwok).
 * @module
 */

import { dirname, join } from "node:path";
import {
  type ClusterInfo,
  KWOK_NODE_ANNOTATION,
  POD_CIDR,
  SERVICE_ACCOUNT_ISSUER,
  SERVICE_CIDR,
} from "./config.ts";

/** etcd's command line: one member on 127.0.0.1, data in the cluster folder. */
export function etcdArgv(info: ClusterInfo, peerPort: number): string[] {
  const peer = `http://127.0.0.1:${peerPort}`;
  return [
    join(info.binDir, "etcd"),
    "--name=default",
    `--data-dir=${join(info.dir, "etcd")}`,
    `--listen-client-urls=${info.etcdEndpoint}`,
    `--advertise-client-urls=${info.etcdEndpoint}`,
    `--listen-peer-urls=${peer}`,
    `--initial-advertise-peer-urls=${peer}`,
    `--initial-cluster=default=${peer}`,
    "--initial-cluster-state=new",
    // Test data: durability across host crashes is worth nothing, speed is.
    "--unsafe-no-fsync=true",
    "--quota-backend-bytes=8589934592",
    "--log-level=warn",
  ];
}

/** kube-apiserver's command line: TLS on 127.0.0.1:`port`, audit log, service-account keys. */
export function apiserverArgv(info: ClusterInfo, port: number): string[] {
  const pki = dirname(info.caCertFile);
  return [
    join(info.binDir, "kube-apiserver"),
    `--etcd-servers=${info.etcdEndpoint}`,
    "--bind-address=127.0.0.1",
    "--advertise-address=127.0.0.1",
    `--secure-port=${port}`,
    `--cert-dir=${pki}`,
    `--tls-cert-file=${join(pki, "apiserver.crt")}`,
    `--tls-private-key-file=${join(pki, "apiserver.key")}`,
    `--client-ca-file=${info.caCertFile}`,
    `--service-cluster-ip-range=${SERVICE_CIDR}`,
    `--service-account-key-file=${join(pki, "sa.pub")}`,
    `--service-account-signing-key-file=${info.saKeyFile}`,
    `--service-account-issuer=${SERVICE_ACCOUNT_ISSUER}`,
    "--authorization-mode=Node,RBAC",
    "--allow-privileged=true",
    // The `kubernetes` Service cannot have a loopback endpoint (validation rejects 127.0.0.1), so
    // the reconciler would only log an error every 10 s.
    "--endpoint-reconciler-type=none",
    // The node lifecycle controller is off (see controllerManagerArgv), so nothing would remove
    // the not-ready taint this plugin puts on new Nodes.
    "--disable-admission-plugins=TaintNodesByCondition",
    `--audit-policy-file=${join(info.dir, "audit-policy.yaml")}`,
    `--audit-log-path=${join(info.dir, "audit.log")}`,
    "--audit-log-maxsize=0",
    "--audit-log-maxbackup=0",
    "--profiling=false",
    // On SIGTERM: drain in-flight requests (new ones get 429 + Retry-After), then give open
    // connections (watches) 2 s, instead of the default 60 s (--request-timeout), to close.
    "--shutdown-send-retry-after=true",
    `--kubelet-client-certificate=${join(pki, "admin.crt")}`,
    `--kubelet-client-key=${join(pki, "admin.key")}`,
    ...featureGatesArgv(info.featureGates),
  ];
}

/**
 * `--feature-gates=A=true,B=false` for the gates given (sorted by name), none for none.
 * @throws RangeError for a name other than letters and digits (kube-apiserver's gate names)
 */
export function featureGatesArgv(gates: Record<string, boolean> = {}): string[] {
  const names = Object.keys(gates).sort();
  const bad = names.filter((n) => !/^[A-Za-z][A-Za-z0-9]*$/.test(n));
  if (bad.length > 0) throw new RangeError(`bad feature gate name(s): ${JSON.stringify(bad)}`);
  if (names.length === 0) return [];
  return [`--feature-gates=${names.map((n) => `${n}=${gates[n] === true}`).join(",")}`];
}

/** kube-controller-manager's command line (its own kubeconfig, the cluster's CIDRs and signing keys). */
export function controllerManagerArgv(info: ClusterInfo): string[] {
  return [
    ...componentArgv(info, "kube-controller-manager"),
    `--service-account-private-key-file=${info.saKeyFile}`,
    `--root-ca-file=${info.caCertFile}`,
    "--use-service-account-credentials=true",
    `--cluster-signing-cert-file=${info.caCertFile}`,
    `--cluster-signing-key-file=${info.caKeyFile}`,
    `--service-cluster-ip-range=${SERVICE_CIDR}`,
    // kwok Nodes have no heartbeat; with the node lifecycle controller on they would go NotReady
    // and their Pods would be evicted. Everything else (garbage collector, namespace,
    // serviceaccount and token controllers, ...) runs.
    "--controllers=*,-node-lifecycle-controller",
    "--kube-api-qps=100",
    "--kube-api-burst=200",
  ];
}

/** kube-scheduler's command line (its own kubeconfig). */
export function schedulerArgv(info: ClusterInfo): string[] {
  return componentArgv(info, "kube-scheduler");
}

/**
 * The start of a control-plane component's command line (kube-controller-manager, kube-scheduler):
 * its binary, its own kubeconfig for the apiserver and for delegated authn/authz, no serving port
 * (`--secure-port=0`) and no leader election (one instance).
 */
function componentArgv(
  info: ClusterInfo,
  name: "kube-controller-manager" | "kube-scheduler",
): string[] {
  const kubeconfig = join(info.dir, "kubeconfigs", name);
  return [
    join(info.binDir, name),
    `--kubeconfig=${kubeconfig}`,
    `--authentication-kubeconfig=${kubeconfig}`,
    `--authorization-kubeconfig=${kubeconfig}`,
    "--bind-address=127.0.0.1",
    "--secure-port=0",
    "--leader-elect=false",
  ];
}

/** kwok's command line: manages the annotated Nodes and their Pods with kwok-stages.yaml. */
export function kwokArgv(info: ClusterInfo): string[] {
  return [
    // A HOME of its own, so a ~/.kwok/kwok.yaml of the user is not loaded.
    "env",
    `HOME=${join(info.dir, "kwok-home")}`,
    join(info.binDir, "kwok"),
    `--kubeconfig=${join(info.dir, "kubeconfigs", "kwok")}`,
    `--config=${join(info.dir, "kwok.yaml")}`,
    "--manage-all-nodes=false",
    `--manage-nodes-with-annotation-selector=${KWOK_NODE_ANNOTATION}=fake`,
    `--cidr=${POD_CIDR}`,
    "--node-ip=127.0.0.1",
  ];
}
