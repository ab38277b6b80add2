/**
 * A real control plane for a controller's tests, started and stopped from the test (what
 * controller-runtime's envtest is for Go): etcd and kube-apiserver on 127.0.0.1 and, with
 * components `"full"`, kube-controller-manager, kube-scheduler and kwok, whose simulated Nodes get
 * Pods scheduled, Running and Ready without running a container.
 *
 * ```ts
 * import { startControlPlane, startFaultProxy } from "./mod.ts";
 *
 * Deno.test("my controller", async (t) => {
 *   await using plane = await startControlPlane({ components: "minimal", crds: ["crd.yaml"] });
 *   const client = plane.client(); // admin (system:masters)
 *   const viewer = await plane.kubeconfigFor("jane", ["viewers"]); // an identity of its own
 *   await using proxy = startFaultProxy(plane.server); // faults between a client and the apiserver
 *   // ... run the controller against plane.kubeconfig (or proxy.url), then assert on the cluster,
 *   // plane.auditEvents({ sinceMs }), or after plane.restartApiserver() / plane.compact().
 * });
 * ```
 *
 * Binaries: from `KUBEBUILDER_ASSETS` when that folder has them (etcd and kube-apiserver are all
 * `"minimal"` needs; kubectl is used when there), else from the cache `APPSERVICE_CACHE_DIR`
 * (default `<package>/.cache`), built on first use from the Go modules pinned in build/ by
 * build.sh (Kubernetes {@linkcode VERSIONS}; needs Go, 10 to 15 minutes on 2 cores) and reused
 * after. kube-controller-manager, kube-scheduler and kwok (only `"full"` runs them) always come
 * from the cache (built when missing). Needs Linux (x86-64 or arm64), bash, setsid and openssl,
 * and this package on disk (build.sh, supervisor.sh and the Go modules are run from beside this
 * module).
 *
 * What it knows nothing of: the operator of this repository. tests/cluster/cluster.ts is the
 * command line (`deno task cluster:up`, `env`, `down`) over the same functions; docs/testing.md
 * describes the control plane, docs/library.md how to test a controller with it.
 *
 * @module
 */
export {
  type ApplyCrdsOptions,
  type AuditEvent,
  type AuditEventsOptions,
  connectControlPlane,
  type ConnectControlPlaneOptions,
  ControlPlane,
  type KubeconfigForOptions,
  startControlPlane,
  type StartControlPlaneOptions,
} from "./control_plane.ts";
export { type ProxyMode, startFaultProxy, TcpProxy } from "./fault_proxy.ts";
export { ConnectProxy, startConnectProxy } from "./connect_proxy.ts";
export {
  type ClusterInfo,
  type ControlPlaneComponents,
  DEFAULT_NODES,
  type StartClusterOptions,
  VERSIONS,
} from "./config.ts";
export {
  compactEtcd,
  readClusterInfo,
  restartApiserver,
  startCluster,
  stopCluster,
} from "./lifecycle.ts";
export { issueCertificate, type IssueCertificateOptions } from "./pki.ts";
