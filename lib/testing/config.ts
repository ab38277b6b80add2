/**
 * The local control plane's shared shape: ClusterInfo, options, versions, timeouts and paths.
 * Part of the `./testing` entry module (mod.ts); docs/testing.md describes the control plane.
 * @module
 */

import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** Everything a test needs to reach and manipulate a running local cluster (`cluster.json`). */
export interface ClusterInfo {
  /** Absolute path of the cluster folder. */
  dir: string;
  /** Folder holding the control-plane binaries (etcd, kube-apiserver, kubectl, kwok, ...). */
  binDir: string;
  /** Admin kubeconfig (embedded certificates, context `appservice-local`). */
  kubeconfig: string;
  /** API server URL, `https://127.0.0.1:PORT`. */
  server: string;
  /** etcd client URL, `http://127.0.0.1:PORT` (plain HTTP, loopback only). */
  etcdEndpoint: string;
  /** PEM file of the cluster CA (signs the serving and all client certificates). */
  caCertFile: string;
  /** PEM file of the CA private key (sign extra client certificates with it). */
  caKeyFile: string;
  /** PEM file of the RSA key that signs ServiceAccount tokens. */
  saKeyFile: string;
  /**
   * Process ids by component: `etcd`, `kube-apiserver`, `kube-controller-manager`,
   * `kube-scheduler`, `kwok` (each also its process group id) and `watchdog` (the supervisor).
   */
  pids: Record<string, number>;
  /** Full argv of kube-apiserver, binary path first; {@linkcode restartApiserver} reuses it. */
  apiserverArgs: string[];
  /**
   * Which components run ({@linkcode ControlPlaneComponents}); absent in a `cluster.json`
   * written before the option existed, which means `"full"`.
   */
  components?: ControlPlaneComponents;
  /**
   * Feature gates kube-apiserver runs with (`--feature-gates`, e.g. `{ ShardedListAndWatch: true
   * }`); absent or empty: the release's defaults. Also in `apiserverArgs`, so an
   * apiserver restart keeps them.
   */
  featureGates?: Record<string, boolean>;
}

/**
 * The components a control plane runs:
 * - `"full"`: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok with its
 *   simulated Nodes (Pods are scheduled and become Running and Ready; namespaces are finalized,
 *   the garbage collector and the ServiceAccount token controllers run). Needs all six binaries.
 * - `"minimal"`: etcd and kube-apiserver only, what controller-runtime's envtest runs: objects
 *   are stored and served and admission runs, but nothing acts on them (a deleted namespace
 *   stays Terminating, no Pod is scheduled, no `default` ServiceAccount appears). Needs only the
 *   etcd and kube-apiserver binaries, so a `KUBEBUILDER_ASSETS` folder that has both is enough
 *   and nothing is built.
 */
export type ControlPlaneComponents = "full" | "minimal";

/** Options of {@linkcode startCluster}. */
export interface StartClusterOptions {
  /** Cluster folder; default `<repo>/.cache/cluster` (lifecycle.ts `defaultClusterDir`). */
  dir?: string;
  /**
   * Number of kwok Nodes `kwok-node-0`..`kwok-node-<n-1>`; default {@linkcode DEFAULT_NODES}
   * with `components: "full"`, and it must be 0 (or unset) with `"minimal"`.
   */
  nodes?: number;
  /** Which components run; default `"full"` (see {@linkcode ControlPlaneComponents}). */
  components?: ControlPlaneComponents;
  /** Aborts the start; whatever was started is stopped again. */
  signal?: AbortSignal;
  /**
   * Feature gates of kube-apiserver, by name (`--feature-gates=A=true,B=false`), e.g.
   * `{ ShardedListAndWatch: true }` to serve `shardSelector` on lists and watches (alpha in
   * Kubernetes 1.36, off by default). Only the apiserver gets them: the other components keep their
   * defaults. Default: none, the release's defaults. Names must be letters and digits (an unknown
   * name makes kube-apiserver exit at start, reported with its log).
   */
  featureGates?: Record<string, boolean>;
  /**
   * Keep the cluster running after the calling process exits (what the CLI `up` does). Risk:
   * nothing but {@linkcode stopCluster}, `cluster.ts down` or the watchdog's maximum lifetime
   * stops it then. Default false: the cluster dies with the process that started it.
   */
  outliveProcess?: boolean;
}

/** Pinned versions; the bin folder name is derived from them (see build.sh). */
export const VERSIONS = { kubernetes: "v1.36.3", etcd: "v3.6.16", kwok: "v0.8.0" } as const;
/** Number of kwok Nodes when `nodes` is not given. */
export const DEFAULT_NODES = 3;
/** kubeconfig context (and cluster) name of the admin kubeconfig. */
export const CONTEXT_NAME = "appservice-local";
/** Service IP range of the API server; its first address, 10.0.0.1, is the `kubernetes` Service. */
export const SERVICE_CIDR = "10.0.0.0/24";
/** Range kwok takes Pod IPs from (must not overlap {@linkcode SERVICE_CIDR}). */
export const POD_CIDR = "10.244.0.0/16";
/** Annotation (with value `fake`) marking the Nodes kwok manages. */
export const KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node";
/** Allocatable and capacity of every kwok Node. */
export const NODE_RESOURCES = { cpu: "32", memory: "256Gi", pods: "110" } as const;
/** ServiceAccount token issuer (and default audience) of the API server. */
export const SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local";
/**
 * Hard bound on the supervisor's (and so the cluster's) lifetime, in seconds; the environment
 * variable `APPSERVICE_CLUSTER_MAX_LIFETIME_SECONDS` overrides it.
 */
export const WATCHDOG_MAX_LIFETIME_SECONDS = 24 * 3600;

/** Bound of the wait for etcd's health, in ms. */
export const ETCD_READY_TIMEOUT_MS = 30_000;
/** Bound of the wait for the API server's `/readyz`, in ms. */
export const APISERVER_READY_TIMEOUT_MS = 60_000;
/** Bound of the wait for the default ServiceAccount and Ready Nodes, in ms. */
export const CLUSTER_READY_TIMEOUT_MS = 60_000;
/** SIGTERM grace before SIGKILL when stopping, as the brief of this module asks. */
export const STOP_GRACE_MS = 10_000;
/** How long to wait for process groups to go after SIGKILL, in ms. */
export const KILL_WAIT_MS = 5_000;
/** Bound of the supervisor's start handshake, in ms. */
export const SUPERVISOR_START_TIMEOUT_MS = 5_000;
/** Bound of one component's spawn through the supervisor, in ms. */
export const COMPONENT_SPAWN_TIMEOUT_MS = 5_000;
/** Interval of every readiness poll, in ms. */
export const POLL_INTERVAL_MS = 100;
/** Bound of one HTTP request to etcd or the API server, in ms (admin requests get 5×). */
export const HTTP_TIMEOUT_MS = 2_000;
/** Lines of a component's log quoted in an error. */
export const LOG_TAIL_LINES = 20;
/** Validity of the certificates made for the cluster, in days. */
export const CERT_VALIDITY_DAYS = 365;
/** Default outage of {@linkcode restartApiserver}. */
export const DEFAULT_APISERVER_DOWN_MS = 1_000;

/** The control plane's components, in start order. */
export const COMPONENTS = [
  "etcd",
  "kube-apiserver",
  "kube-controller-manager",
  "kube-scheduler",
  "kwok",
] as const;
/** One of {@linkcode COMPONENTS}. */
export type Component = typeof COMPONENTS[number];
/** Name of the supervisor's pid file (`run/watchdog.pid`). */
export const WATCHDOG = "watchdog";

const HERE = dirname(fileURLToPath(import.meta.url));
/**
 * The package's root folder (the repository's, in a checkout): two levels above this module.
 * The default cache (`<REPO>/.cache`) and the default cluster folders are under it.
 */
export const REPO = resolve(HERE, "..", "..");
/** build.sh: builds or finds the control plane's binaries. */
export const BUILD_SCRIPT = join(HERE, "build.sh");
/** supervisor.sh: starts and reaps the components. */
export const SUPERVISOR_SCRIPT = join(HERE, "supervisor.sh");
/** kwok's stages: how simulated Pods become Running and Ready. */
export const KWOK_STAGES_FILE = join(HERE, "kwok-stages.yaml");
