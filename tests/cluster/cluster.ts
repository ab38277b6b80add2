/**
 * The local control plane for tests and benchmarks: etcd, kube-apiserver, kube-controller-manager,
 * kube-scheduler and kwok (simulated Nodes whose Pods become Running and Ready) on 127.0.0.1.
 *
 * Module API: {@linkcode startCluster}, {@linkcode stopCluster}, {@linkcode restartApiserver},
 * {@linkcode compactEtcd}, {@linkcode readClusterInfo}. CLI:
 *
 * ```sh
 * deno run -A tests/cluster/cluster.ts up [--nodes N] [--dir D]   # build, start, leave running
 * deno run -A tests/cluster/cluster.ts env [--dir D]              # its KUBECONFIG and PATH exports
 * deno run -A tests/cluster/cluster.ts down [--dir D]
 * deno run -A tests/cluster/cluster.ts status [--dir D]
 * ```
 *
 * Layout of a cluster folder (default `${APPSERVICE_CACHE_DIR:-<repo>/.cache}/cluster`):
 * `kubeconfig` (admin, context `appservice-local`), `cluster.json` ({@linkcode ClusterInfo}),
 * `audit.log` (Metadata level, every request), `logs/<component>.log`, `pki/`, `etcd/` (data),
 * `run/` (pid files and the supervisor protocol, see supervisor.sh).
 *
 * Processes: every component runs in its own process group (setsid), started and reaped by a small
 * bash supervisor (supervisor.sh, pid under `pids.watchdog`). The supervisor tears the cluster down
 * when the process that called {@linkcode startCluster} dies (test failure, Ctrl-C), unless the
 * cluster was started by the CLI `up`, and in any case after
 * {@linkcode WATCHDOG_MAX_LIFETIME_SECONDS}.
 *
 * Test sanitizers: the supervisor is a child process of the calling Deno process until
 * {@linkcode stopCluster} reaps it, so start and stop the cluster within one test (with steps) or
 * turn `sanitizeResources`/`sanitizeOps` off for the tests that start and stop it.
 *
 * Uses Deno APIs and `node:` builtins only, plus the openssl, bash and setsid commands.
 * @module
 */

import { parseArgs } from "node:util";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

// ---------------------------------------------------------------------------------------------
// Public types and constants

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
}

/** Options of {@linkcode startCluster}. */
export interface StartClusterOptions {
  /** Cluster folder; default `${APPSERVICE_CACHE_DIR:-<repo>/.cache}/cluster`. */
  dir?: string;
  /** Number of kwok Nodes `kwok-node-0`..`kwok-node-<n-1>`; default {@linkcode DEFAULT_NODES}. */
  nodes?: number;
  /** Aborts the start; whatever was started is stopped again. */
  signal?: AbortSignal;
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

const ETCD_READY_TIMEOUT_MS = 30_000;
const APISERVER_READY_TIMEOUT_MS = 60_000;
const CLUSTER_READY_TIMEOUT_MS = 60_000;
/** SIGTERM grace before SIGKILL when stopping, as the brief of this module asks. */
const STOP_GRACE_MS = 10_000;
const KILL_WAIT_MS = 5_000;
const SUPERVISOR_START_TIMEOUT_MS = 5_000;
const COMPONENT_SPAWN_TIMEOUT_MS = 5_000;
const POLL_INTERVAL_MS = 100;
const HTTP_TIMEOUT_MS = 2_000;
const LOG_TAIL_LINES = 20;
const CERT_VALIDITY_DAYS = 365;
/** Default outage of {@linkcode restartApiserver}. */
const DEFAULT_APISERVER_DOWN_MS = 1_000;

const COMPONENTS = [
  "etcd",
  "kube-apiserver",
  "kube-controller-manager",
  "kube-scheduler",
  "kwok",
] as const;
type Component = typeof COMPONENTS[number];
const WATCHDOG = "watchdog";

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = resolve(HERE, "..", "..");
const BUILD_SCRIPT = join(HERE, "build.sh");
const SUPERVISOR_SCRIPT = join(HERE, "supervisor.sh");
const KWOK_STAGES_FILE = join(HERE, "kwok-stages.yaml");

/** Supervisors spawned by this process, by cluster folder, so stopCluster can reap them. */
const supervisors = new Map<string, Deno.ChildProcess>();

// ---------------------------------------------------------------------------------------------
// Public API

/**
 * Builds (or finds cached) binaries, then starts a fresh cluster in `opts.dir` and waits until the
 * API server is ready, the `default` ServiceAccount exists in namespace `default` and every kwok
 * Node is Ready. A cluster left running in the same folder is stopped first, and the folder's
 * previous state (etcd data, certificates, logs) is removed.
 *
 * On failure everything started is stopped and the Error names the component and carries the
 * last lines of its log.
 */
export async function startCluster(opts: StartClusterOptions = {}): Promise<ClusterInfo> {
  const signal = opts.signal;
  const nodes = opts.nodes ?? DEFAULT_NODES;
  if (!Number.isInteger(nodes) || nodes < 0 || nodes > 1000) {
    throw new RangeError(`nodes must be an integer in 0..1000, got ${nodes}`);
  }
  const dir = resolve(opts.dir ?? defaultClusterDir());
  signal?.throwIfAborted();

  await stopCluster(dir);
  await resetClusterDir(dir);
  const binDir = await ensureBinaries(signal);
  signal?.throwIfAborted();

  const [etcdClientPort, etcdPeerPort, apiserverPort] = freePorts(3);
  const pki = join(dir, "pki");
  await makePki(pki);
  const server = `https://127.0.0.1:${apiserverPort}`;
  const info: ClusterInfo = {
    dir,
    binDir,
    kubeconfig: join(dir, "kubeconfig"),
    server,
    etcdEndpoint: `http://127.0.0.1:${etcdClientPort}`,
    caCertFile: join(pki, "ca.crt"),
    caKeyFile: join(pki, "ca.key"),
    saKeyFile: join(pki, "sa.key"),
    pids: {},
    apiserverArgs: [],
  };
  await writeConfigFiles(info);
  info.apiserverArgs = apiserverArgv(info, apiserverPort);

  try {
    info.pids[WATCHDOG] = await startSupervisor(dir);
    await writeClusterInfo(info);

    await startComponent(info, "etcd", etcdArgv(info, etcdPeerPort));
    await waitFor(
      info,
      "etcd",
      "to report healthy",
      ETCD_READY_TIMEOUT_MS,
      signal,
      () => etcdHealthy(info),
    );

    await startComponent(info, "kube-apiserver", info.apiserverArgs);
    await waitApiserverReady(info, signal);

    await startComponent(info, "kube-controller-manager", controllerManagerArgv(info));
    await startComponent(info, "kube-scheduler", schedulerArgv(info));
    await startComponent(info, "kwok", kwokArgv(info));
    await writeClusterInfo(info);

    await withApi(info, async (api) => {
      for (let i = 0; i < nodes; i++) await createNode(api, `kwok-node-${i}`);
      await waitFor(
        info,
        "kube-controller-manager",
        "to create ServiceAccount default/default",
        CLUSTER_READY_TIMEOUT_MS,
        signal,
        async () =>
          (await api("GET", "/api/v1/namespaces/default/serviceaccounts/default")).status === 200,
      );
      await waitFor(
        info,
        "kwok",
        `to make ${nodes} Nodes Ready`,
        CLUSTER_READY_TIMEOUT_MS,
        signal,
        async () => {
          const res = await api("GET", "/api/v1/nodes?labelSelector=type%3Dkwok");
          if (res.status !== 200) return false;
          const items = (res.body as { items?: NodeLike[] }).items ?? [];
          return items.filter(isNodeReady).length >= nodes;
        },
      );
    });

    if (opts.outliveProcess) await Deno.writeTextFile(join(dir, "run", "detached"), "");
    await writeClusterInfo(info);
    return info;
  } catch (err) {
    try {
      await stopCluster(info);
    } catch (stopErr) {
      console.error(`stopCluster after failed start: ${errorText(stopErr)}`);
    }
    throw err;
  }
}

/**
 * Stops the cluster of a folder (or of a {@linkcode ClusterInfo}): SIGTERM to every component's
 * process group but etcd's, up to 10 s, then SIGKILL; then the same for etcd, then for the
 * supervisor. Only processes whose command line names the cluster folder are signalled, so stale
 * pids never hit a stranger. Leaves logs, `audit.log` and certificates; removes `cluster.json`.
 * A folder without a cluster is a no-op. Throws if some process survived SIGKILL.
 */
export async function stopCluster(dirOrInfo: string | ClusterInfo): Promise<void> {
  const dir = resolve(typeof dirOrInfo === "string" ? dirOrInfo : dirOrInfo.dir);
  const recorded = await readClusterInfo(dir);
  const pidsByName = new Map<string, Set<number>>();
  const note = (name: string, pid: unknown) => {
    if (typeof pid !== "number" || !Number.isInteger(pid) || pid <= 1) return;
    if (!pidsByName.has(name)) pidsByName.set(name, new Set());
    pidsByName.get(name)!.add(pid);
  };
  if (typeof dirOrInfo !== "string") {
    for (const [name, pid] of Object.entries(dirOrInfo.pids)) note(name, pid);
  }
  for (const [name, pid] of Object.entries(recorded?.pids ?? {})) note(name, pid);
  const run = join(dir, "run");
  for (const name of [...COMPONENTS, WATCHDOG]) {
    const pid = await readPidFile(join(run, `${name}.pid`));
    if (pid !== undefined) note(name, pid);
  }
  if (await exists(run)) await Deno.writeTextFile(join(run, "stop"), "").catch(() => {});

  const ours = (pid: number) => isAlive(pid) && belongsTo(pid, dir);
  const pidsOf = (names: string[]) => names.flatMap((name) => [...pidsByName.get(name) ?? []]);
  // etcd last: kube-apiserver's shutdown hooks write to it and would hang until SIGKILL.
  const first = pidsOf([...pidsByName.keys()].filter((n) => n !== WATCHDOG && n !== "etcd"));
  const survivors = await terminateGroups(first.filter(ours));
  survivors.push(...await terminateGroups(pidsOf(["etcd"]).filter(ours)));

  const supervisorPids = [...(pidsByName.get(WATCHDOG) ?? [])].filter(ours);
  survivors.push(...await terminateGroups(supervisorPids));
  const child = supervisors.get(dir);
  if (child) {
    supervisors.delete(dir);
    await withTimeout(child.status, KILL_WAIT_MS).catch(() => {});
  }

  await Deno.remove(join(dir, "cluster.json")).catch(() => {});
  for (const name of [...COMPONENTS, WATCHDOG]) {
    await Deno.remove(join(run, `${name}.pid`)).catch(() => {});
  }
  if (survivors.length > 0) {
    throw new Error(`stopCluster(${dir}): processes survived SIGKILL: ${survivors.join(", ")}`);
  }
}

/**
 * Stops kube-apiserver (SIGTERM, then SIGKILL after 10 s), keeps it down for `downMs`
 * (default 1000), starts it again with the same argv (same port, same etcd) and waits until
 * `/readyz` is ok. Updates `info.pids` and `cluster.json`. Other components keep running and
 * reconnect by themselves.
 */
export async function restartApiserver(
  info: ClusterInfo,
  downMs: number = DEFAULT_APISERVER_DOWN_MS,
): Promise<void> {
  const current = (await readPidFile(join(info.dir, "run", "kube-apiserver.pid"))) ??
    info.pids["kube-apiserver"];
  const supervisor = info.pids[WATCHDOG];
  if (supervisor === undefined || !isAlive(supervisor)) {
    throw new Error(`restartApiserver: the cluster in ${info.dir} is not running (no supervisor)`);
  }
  if (current !== undefined && isAlive(current) && belongsTo(current, info.dir)) {
    const survivors = await terminateGroups([current]);
    if (survivors.length > 0) throw new Error(`restartApiserver: pid ${current} survived SIGKILL`);
  }
  await sleep(Math.max(0, downMs));
  await startComponent(info, "kube-apiserver", info.apiserverArgs);
  await waitApiserverReady(info);
  await writeClusterInfo(info);
}

/**
 * Compacts etcd to its current revision, physically (the call returns once old revisions are
 * gone), through etcd's HTTP/JSON gateway: `POST /v3/kv/range` for the header revision, then
 * `POST /v3/kv/compaction`. Watches and lists from older resourceVersions then get 410 Gone (the
 * API server's watch cache may still serve recent ones for a while).
 */
export async function compactEtcd(info: ClusterInfo): Promise<void> {
  const range = await etcdPost(info, "/v3/kv/range", {
    key: btoa("/registry/"),
    limit: 1,
    keys_only: true,
  });
  const revision = (range as { header?: { revision?: string } }).header?.revision;
  if (!revision) throw new Error(`compactEtcd: no revision in ${JSON.stringify(range)}`);
  try {
    await etcdPost(info, "/v3/kv/compaction", { revision, physical: true });
  } catch (err) {
    // Compacting to a revision that is already compacted is success for our purpose.
    if (!/compacted/.test(errorText(err))) throw err;
  }
}

/** Reads `<dir>/cluster.json` (default folder when omitted); undefined when there is none. */
export async function readClusterInfo(dir?: string): Promise<ClusterInfo | undefined> {
  const file = join(resolve(dir ?? defaultClusterDir()), "cluster.json");
  let text: string;
  try {
    text = await Deno.readTextFile(file);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
  return JSON.parse(text) as ClusterInfo;
}

/** The cache root: `$APPSERVICE_CACHE_DIR`, else `<repo>/.cache`. */
export function cacheDir(): string {
  return resolve(Deno.env.get("APPSERVICE_CACHE_DIR") || join(REPO, ".cache"));
}

/** The default cluster folder: `<cacheDir()>/cluster`. */
export function defaultClusterDir(): string {
  return join(cacheDir(), "cluster");
}

// ---------------------------------------------------------------------------------------------
// Binaries, ports, files

/** Runs build.sh and returns the bin folder (its last stdout line); streams build progress. */
async function ensureBinaries(signal?: AbortSignal): Promise<string> {
  const child = new Deno.Command("bash", {
    args: [BUILD_SCRIPT],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const onAbort = () => {
    try {
      child.kill("SIGTERM");
    } catch { /* already gone */ }
  };
  signal?.addEventListener("abort", onAbort, { once: true });
  const stderrLines: string[] = [];
  const pump = (async () => {
    let pending = "";
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
      pending += chunk;
      const lines = pending.split("\n");
      pending = lines.pop()!;
      for (const line of lines) {
        stderrLines.push(line);
        // Only building is news; "cached" lines would be noise on every start.
        if (!/: (cached|from KUBEBUILDER_ASSETS)/.test(line)) console.error(line);
      }
    }
    if (pending) stderrLines.push(pending);
  })();
  const [stdout, status] = await Promise.all([new Response(child.stdout).text(), child.status]);
  await pump;
  signal?.removeEventListener("abort", onAbort);
  signal?.throwIfAborted();
  if (!status.success) {
    throw new Error(
      `build.sh failed (exit ${status.code}):\n${stderrLines.slice(-LOG_TAIL_LINES).join("\n")}`,
    );
  }
  const binDir = stdout.trim().split("\n").pop() ?? "";
  if (!binDir.startsWith("/")) throw new Error(`build.sh printed no bin folder: ${stdout}`);
  return binDir;
}

/** Distinct free loopback ports: bind port 0, read the port, close. */
function freePorts(count: number): number[] {
  const ports = new Set<number>();
  for (let attempt = 0; ports.size < count && attempt < count * 20; attempt++) {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    ports.add((listener.addr as Deno.NetAddr).port);
    listener.close();
  }
  if (ports.size < count) throw new Error(`could not find ${count} distinct free ports`);
  return [...ports];
}

/** Entries of a cluster folder that a fresh start replaces (other files are left alone). */
const CLUSTER_DIR_ENTRIES = [
  "cluster.json",
  "kubeconfig",
  "audit.log",
  "audit-policy.yaml",
  "kwok.yaml",
  "etcd",
  "kubeconfigs",
  "kwok-home",
  "logs",
  "pki",
  "run",
];

async function resetClusterDir(dir: string): Promise<void> {
  await Deno.mkdir(dir, { recursive: true });
  for (const entry of CLUSTER_DIR_ENTRIES) {
    await Deno.remove(join(dir, entry), { recursive: true }).catch((err) => {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    });
  }
  for (const sub of ["logs", "run", "pki", "kubeconfigs", "kwok-home"]) {
    await Deno.mkdir(join(dir, sub), { recursive: true });
  }
}

const OPENSSL_CONFIG = `# written by tests/cluster/cluster.ts
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,\
DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:::1,IP:10.0.0.1
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
`;

/** Client certificates: file stem and subject. */
const CLIENT_CERTS: ReadonlyArray<readonly [string, string]> = [
  ["admin", "/O=system:masters/CN=admin"],
  ["kube-controller-manager", "/CN=system:kube-controller-manager"],
  ["kube-scheduler", "/CN=system:kube-scheduler"],
  ["kwok", "/O=system:masters/CN=kwok"],
];

/**
 * CA, API server serving certificate, client certificates (ECDSA P-256) and the RSA
 * ServiceAccount key pair, all made with the openssl CLI into `pki`.
 */
async function makePki(pki: string): Promise<void> {
  const saKey = join(pki, "sa.key");
  const serviceAccountKeys = (async () => {
    await openssl([
      "genpkey",
      "-algorithm",
      "RSA",
      "-pkeyopt",
      "rsa_keygen_bits:2048",
      "-out",
      saKey,
    ]);
    await openssl(["pkey", "-in", saKey, "-pubout", "-out", join(pki, "sa.pub")]);
  })();
  const ca = await issueCertificate({
    dir: pki,
    stem: "ca",
    subject: "/CN=appservice-local-ca",
    kind: "ca",
    days: CERT_VALIDITY_DAYS * 10,
  });
  await Promise.all([
    serviceAccountKeys,
    issueCertificate({
      dir: pki,
      stem: "apiserver",
      subject: "/CN=kube-apiserver",
      kind: "server",
      ca,
    }),
    ...CLIENT_CERTS.map(([stem, subject]) =>
      issueCertificate({ dir: pki, stem, subject, kind: "client", ca })
    ),
  ]);
}

/** Options of {@linkcode issueCertificate}. */
export interface IssueCertificateOptions {
  /** Folder of the files (`<stem>.crt`, `<stem>.key`, and `openssl.cnf` when absent). */
  dir: string;
  stem: string;
  /** openssl `-subj`, e.g. `/O=system:masters/CN=admin`. */
  subject: string;
  /**
   * `ca`: self-signed CA; `server`: serving certificate for localhost, 127.0.0.1, ::1 and the
   * `kubernetes` Service names; `client`: client authentication.
   */
  kind: "ca" | "server" | "client";
  /** The issuing CA (PEM files); required unless `kind` is `ca`. */
  ca?: { certFile: string; keyFile: string };
  /** Validity in days; default {@linkcode CERT_VALIDITY_DAYS}. */
  days?: number;
}

/**
 * Makes an ECDSA P-256 key and certificate with the openssl CLI: `<dir>/<stem>.key` (mode 0600)
 * and `<dir>/<stem>.crt`. Used for the cluster's PKI and by tests that rotate certificates.
 * @throws Error when openssl is missing or fails.
 */
export async function issueCertificate(
  o: IssueCertificateOptions,
): Promise<{ certFile: string; keyFile: string }> {
  const cnf = join(o.dir, "openssl.cnf");
  try {
    await Deno.writeTextFile(cnf, OPENSSL_CONFIG, { createNew: true });
  } catch (err) {
    if (!(err instanceof Deno.errors.AlreadyExists)) throw err;
  }
  const ecKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  const keyFile = join(o.dir, `${o.stem}.key`);
  const certFile = join(o.dir, `${o.stem}.crt`);
  const days = String(o.days ?? CERT_VALIDITY_DAYS);
  if (o.kind === "ca") {
    await openssl([
      "req",
      "-x509",
      "-new",
      "-config",
      cnf,
      "-extensions",
      "ca",
      ...ecKey,
      "-keyout",
      keyFile,
      "-out",
      certFile,
      "-days",
      days,
      "-subj",
      o.subject,
    ]);
  } else {
    if (!o.ca) throw new Error(`issueCertificate ${o.stem}: a ${o.kind} certificate needs a CA`);
    const csr = join(o.dir, `${o.stem}.csr`);
    await openssl([
      "req",
      "-new",
      "-config",
      cnf,
      ...ecKey,
      "-keyout",
      keyFile,
      "-out",
      csr,
      "-subj",
      o.subject,
    ]);
    await openssl([
      "x509",
      "-req",
      "-in",
      csr,
      "-CA",
      o.ca.certFile,
      "-CAkey",
      o.ca.keyFile,
      "-set_serial",
      randomSerial(),
      "-days",
      days,
      "-extfile",
      cnf,
      "-extensions",
      o.kind,
      "-out",
      certFile,
    ]);
    await Deno.remove(csr);
  }
  await Deno.chmod(keyFile, 0o600);
  return { certFile, keyFile };
}

function randomSerial(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[0] &= 0x7f; // positive
  return "0x" + [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

async function openssl(args: string[]): Promise<void> {
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command("openssl", { args, stdin: "null" }).output();
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new Error("openssl command not found (apt-get install -y openssl)");
    }
    throw err;
  }
  if (!out.success) {
    throw new Error(
      `openssl ${args.slice(0, 2).join(" ")} failed: ${new TextDecoder().decode(out.stderr)}`,
    );
  }
}

/** A kubeconfig with embedded certificate data. */
function kubeconfigYaml(server: string, caPem: string, certPem: string, keyPem: string): string {
  return `apiVersion: v1
kind: Config
clusters:
  - name: ${CONTEXT_NAME}
    cluster:
      server: ${server}
      certificate-authority-data: ${btoa(caPem)}
users:
  - name: ${CONTEXT_NAME}-user
    user:
      client-certificate-data: ${btoa(certPem)}
      client-key-data: ${btoa(keyPem)}
contexts:
  - name: ${CONTEXT_NAME}
    context:
      cluster: ${CONTEXT_NAME}
      user: ${CONTEXT_NAME}-user
current-context: ${CONTEXT_NAME}
preferences: {}
`;
}

const AUDIT_POLICY =
  `# Every request at Metadata level (who, verb, resource, response code; no bodies).
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
`;

/** Admin and component kubeconfigs, audit policy, kwok configuration. */
async function writeConfigFiles(info: ClusterInfo): Promise<void> {
  const pki = dirname(info.caCertFile);
  const ca = await Deno.readTextFile(info.caCertFile);
  for (const [stem] of CLIENT_CERTS) {
    const cert = await Deno.readTextFile(join(pki, `${stem}.crt`));
    const key = await Deno.readTextFile(join(pki, `${stem}.key`));
    const file = stem === "admin" ? info.kubeconfig : join(info.dir, "kubeconfigs", stem);
    await Deno.writeTextFile(file, kubeconfigYaml(info.server, ca, cert, key), { mode: 0o600 });
  }
  await Deno.writeTextFile(join(info.dir, "audit-policy.yaml"), AUDIT_POLICY);
  await Deno.copyFile(KWOK_STAGES_FILE, join(info.dir, "kwok.yaml"));
}

async function writeClusterInfo(info: ClusterInfo): Promise<void> {
  const file = join(info.dir, "cluster.json");
  await Deno.writeTextFile(`${file}.tmp`, JSON.stringify(info, null, 2) + "\n");
  await Deno.rename(`${file}.tmp`, file);
}

// ---------------------------------------------------------------------------------------------
// Component command lines

function etcdArgv(info: ClusterInfo, peerPort: number): string[] {
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

function apiserverArgv(info: ClusterInfo, port: number): string[] {
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
  ];
}

function controllerManagerArgv(info: ClusterInfo): string[] {
  const kubeconfig = join(info.dir, "kubeconfigs", "kube-controller-manager");
  return [
    join(info.binDir, "kube-controller-manager"),
    `--kubeconfig=${kubeconfig}`,
    `--authentication-kubeconfig=${kubeconfig}`,
    `--authorization-kubeconfig=${kubeconfig}`,
    "--bind-address=127.0.0.1",
    "--secure-port=0",
    "--leader-elect=false",
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

function schedulerArgv(info: ClusterInfo): string[] {
  const kubeconfig = join(info.dir, "kubeconfigs", "kube-scheduler");
  return [
    join(info.binDir, "kube-scheduler"),
    `--kubeconfig=${kubeconfig}`,
    `--authentication-kubeconfig=${kubeconfig}`,
    `--authorization-kubeconfig=${kubeconfig}`,
    "--bind-address=127.0.0.1",
    "--secure-port=0",
    "--leader-elect=false",
  ];
}

function kwokArgv(info: ClusterInfo): string[] {
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

// ---------------------------------------------------------------------------------------------
// Supervisor and processes

async function startSupervisor(dir: string): Promise<number> {
  const fromEnv = Number(Deno.env.get("APPSERVICE_CLUSTER_MAX_LIFETIME_SECONDS"));
  const maxLifetimeSeconds = Number.isFinite(fromEnv) && fromEnv > 0
    ? fromEnv
    : WATCHDOG_MAX_LIFETIME_SECONDS;
  const ownerStart = readStat(Deno.pid)?.startTicks;
  if (ownerStart === undefined) throw new Error("cannot read /proc/self/stat");
  const child = new Deno.Command("setsid", {
    args: [
      "bash",
      SUPERVISOR_SCRIPT,
      dir,
      String(Deno.pid),
      String(ownerStart),
      String(Math.max(1, Math.floor(maxLifetimeSeconds))),
    ],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  child.unref();
  supervisors.set(dir, child);
  await Deno.writeTextFile(join(dir, "run", `${WATCHDOG}.pid`), `${child.pid}\n`);
  const ready = join(dir, "run", "ready");
  const deadline = Date.now() + SUPERVISOR_START_TIMEOUT_MS;
  while (!(await exists(ready))) {
    if (!isAlive(child.pid) || Date.now() > deadline) {
      signalGroup(child.pid, "SIGKILL");
      supervisors.delete(dir);
      await withTimeout(child.status, KILL_WAIT_MS).catch(() => {});
      throw new Error(
        `watchdog (supervisor.sh) did not start\n${await logTail(dir, "supervisor")}`,
      );
    }
    await sleep(20);
  }
  return child.pid;
}

/** Asks the supervisor to start a component; returns its pid (= process group id). */
async function startComponent(info: ClusterInfo, name: Component, argv: string[]): Promise<number> {
  const run = join(info.dir, "run");
  const supervisor = info.pids[WATCHDOG];
  const pidFile = join(run, `${name}.pid`);
  await Deno.remove(pidFile).catch(() => {});
  await Deno.writeTextFile(join(run, `${name}.argv`), argv.map((a) => `${a}\0`).join(""));
  await Deno.writeTextFile(join(run, `${name}.want`), "");
  const deadline = Date.now() + COMPONENT_SPAWN_TIMEOUT_MS;
  for (let turn = 0; Date.now() < deadline; turn++) {
    const pid = await readPidFile(pidFile);
    if (pid !== undefined) {
      info.pids[name] = pid;
      return pid;
    }
    if (!isAlive(supervisor)) break;
    if (turn % 10 === 0) {
      try {
        Deno.kill(supervisor, "SIGUSR1"); // wake it; it also polls every 0.5 s
      } catch { /* raced with its exit; reported below */ }
    }
    await sleep(50);
  }
  throw new Error(
    `${name}: the watchdog did not start it within ${COMPONENT_SPAWN_TIMEOUT_MS} ms\n` +
      (await logTail(info.dir, "supervisor")),
  );
}

/**
 * Polls `check` every 100 ms until it returns true, for at most `timeoutMs`. Fails early, naming
 * the component and showing its log, when the component's process has exited.
 */
async function waitFor(
  info: ClusterInfo,
  component: Component,
  what: string,
  timeoutMs: number,
  signal: AbortSignal | undefined,
  check: () => Promise<boolean>,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError = "";
  while (true) {
    signal?.throwIfAborted();
    const pid = info.pids[component];
    if (pid === undefined || !isAlive(pid)) {
      throw await componentError(info, component, `exited while waiting for it ${what}`);
    }
    try {
      if (await check()) return;
      lastError = "";
    } catch (err) {
      lastError = errorText(err);
    }
    if (Date.now() > deadline) {
      const why = lastError ? ` (last error: ${lastError})` : "";
      throw await componentError(info, component, `timed out after ${timeoutMs} ms ${what}${why}`);
    }
    await sleep(POLL_INTERVAL_MS);
  }
}

async function componentError(info: ClusterInfo, name: string, reason: string): Promise<Error> {
  return new Error(`${name} ${reason}\n${await logTail(info.dir, name)}`);
}

async function logTail(dir: string, name: string): Promise<string> {
  const file = join(dir, "logs", `${name}.log`);
  let text = "";
  try {
    text = await Deno.readTextFile(file);
  } catch {
    return `(no log at ${file})`;
  }
  const lines = text.trimEnd().split("\n").slice(-LOG_TAIL_LINES);
  return `--- last ${lines.length} lines of ${file} ---\n${lines.join("\n")}`;
}

interface ProcStat {
  state: string;
  ppid: number;
  pgrp: number;
  startTicks: string;
}

/** Fields of /proc/PID/stat, or undefined when there is no such process. */
function readStat(pid: number): ProcStat | undefined {
  let text: string;
  try {
    text = Deno.readTextFileSync(`/proc/${pid}/stat`);
  } catch {
    return undefined;
  }
  // The command name (field 2) may contain spaces and parentheses: split after the last ")".
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return {
    state: fields[0],
    ppid: Number(fields[1]),
    pgrp: Number(fields[2]),
    startTicks: fields[19],
  };
}

/** True when the process exists and is not a zombie. */
function isAlive(pid: number): boolean {
  const stat = readStat(pid);
  return stat !== undefined && stat.state !== "Z";
}

/**
 * True when the command line of `pid` names the cluster folder `dir` (an argument equal to it or
 * a path inside it), which every component and the supervisor of that cluster have.
 */
function belongsTo(pid: number, dir: string): boolean {
  let argv: string[];
  try {
    argv = Deno.readTextFileSync(`/proc/${pid}/cmdline`).split("\0");
  } catch {
    return false;
  }
  return argv.some((arg) => arg === dir || arg.includes(`${dir}/`));
}

/** Process groups among `pgids` that still have a live (non-zombie) member. */
function liveGroups(pgids: number[]): number[] {
  const wanted = new Set(pgids);
  const live = new Set<number>();
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    const stat = readStat(Number(entry.name));
    if (stat && stat.state !== "Z" && wanted.has(stat.pgrp)) live.add(stat.pgrp);
  }
  return [...live];
}

function signalGroup(pgid: number, signal: Deno.Signal): void {
  try {
    Deno.kill(-pgid, signal);
  } catch { /* group already gone */ }
}

/**
 * SIGTERM to each process group, wait up to {@linkcode STOP_GRACE_MS}, SIGKILL the rest, wait up to
 * {@linkcode KILL_WAIT_MS}. Returns the groups still alive after that (normally none).
 */
async function terminateGroups(pgids: number[]): Promise<number[]> {
  if (pgids.length === 0) return [];
  for (const pgid of pgids) signalGroup(pgid, "SIGTERM");
  let live = await waitGroupsGone(pgids, STOP_GRACE_MS);
  if (live.length === 0) return [];
  for (const pgid of live) signalGroup(pgid, "SIGKILL");
  live = await waitGroupsGone(live, KILL_WAIT_MS);
  return live;
}

async function waitGroupsGone(pgids: number[], timeoutMs: number): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  let live = liveGroups(pgids);
  while (live.length > 0 && Date.now() < deadline) {
    await sleep(50);
    live = liveGroups(live);
  }
  return live;
}

async function readPidFile(file: string): Promise<number | undefined> {
  try {
    const pid = Number((await Deno.readTextFile(file)).trim());
    return Number.isInteger(pid) && pid > 1 ? pid : undefined;
  } catch {
    return undefined;
  }
}

// ---------------------------------------------------------------------------------------------
// HTTP: etcd gateway and API server

async function etcdHealthy(info: ClusterInfo): Promise<boolean> {
  const res = await fetch(`${info.etcdEndpoint}/health`, {
    signal: AbortSignal.timeout(HTTP_TIMEOUT_MS),
  });
  const body = await res.json() as { health?: string };
  return res.ok && body.health === "true";
}

async function etcdPost(info: ClusterInfo, path: string, body: unknown): Promise<unknown> {
  const res = await fetch(`${info.etcdEndpoint}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`etcd ${path}: HTTP ${res.status}: ${text}`);
  return JSON.parse(text);
}

type Api = (method: string, path: string, body?: unknown) => Promise<{
  status: number;
  body: unknown;
}>;

/** Runs `fn` with an admin API client (mutual TLS with the admin certificate). */
async function withApi<T>(info: ClusterInfo, fn: (api: Api) => Promise<T>): Promise<T> {
  const pki = dirname(info.caCertFile);
  const client = Deno.createHttpClient({
    caCerts: [await Deno.readTextFile(info.caCertFile)],
    cert: await Deno.readTextFile(join(pki, "admin.crt")),
    key: await Deno.readTextFile(join(pki, "admin.key")),
  });
  const api: Api = async (method, path, body) => {
    const res = await fetch(`${info.server}${path}`, {
      method,
      client,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(HTTP_TIMEOUT_MS * 5),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch { /* not JSON, e.g. /readyz */ }
    return { status: res.status, body: parsed };
  };
  try {
    return await fn(api);
  } finally {
    client.close();
  }
}

async function waitApiserverReady(info: ClusterInfo, signal?: AbortSignal): Promise<void> {
  await withApi(
    info,
    (api) =>
      waitFor(
        info,
        "kube-apiserver",
        "to be ready",
        APISERVER_READY_TIMEOUT_MS,
        signal,
        async () => {
          const res = await api("GET", "/readyz");
          return res.status === 200;
        },
      ),
  );
}

interface NodeLike {
  status?: { conditions?: { type: string; status: string }[] };
}

function isNodeReady(node: NodeLike): boolean {
  return (node.status?.conditions ?? []).some((c) => c.type === "Ready" && c.status === "True");
}

async function createNode(api: Api, name: string): Promise<void> {
  const res = await api("POST", "/api/v1/nodes", {
    apiVersion: "v1",
    kind: "Node",
    metadata: {
      name,
      annotations: { [KWOK_NODE_ANNOTATION]: "fake", "node.alpha.kubernetes.io/ttl": "0" },
      labels: {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/role": "agent",
        "node-role.kubernetes.io/agent": "",
        type: "kwok",
      },
    },
    spec: {},
    status: {
      allocatable: { ...NODE_RESOURCES },
      capacity: { ...NODE_RESOURCES },
      addresses: [
        { type: "InternalIP", address: "127.0.0.1" },
        { type: "Hostname", address: name },
      ],
    },
  });
  if (res.status !== 201 && res.status !== 409) {
    throw new Error(`creating Node ${name}: HTTP ${res.status}: ${JSON.stringify(res.body)}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Small helpers

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch {
    return false;
  }
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

// ---------------------------------------------------------------------------------------------
// CLI

/** The shell lines that point kubectl (and the operator) at a cluster: KUBECONFIG and PATH. */
function exportLines(info: ClusterInfo): string {
  return `export KUBECONFIG=${shellQuote(info.kubeconfig)}\n` +
    `export PATH=${shellQuote(info.binDir)}:"$PATH"  # the control plane's kubectl`;
}

/** `value` as one POSIX shell word (single-quoted only when it needs quoting). */
function shellQuote(value: string): string {
  return /^[\w@%+=:,./-]+$/.test(value) ? value : `'${value.replaceAll("'", `'\\''`)}'`;
}

const USAGE = `usage: deno run -A tests/cluster/cluster.ts <command> [flags]
  up [--nodes N] [--dir D]   build binaries if needed, start a cluster, leave it running; prints
                             shell exports of KUBECONFIG and PATH (its kubectl) for eval
  env [--dir D]              the same exports for the running cluster (no restart)
  down [--dir D]             stop the cluster
  status [--dir D]           show the cluster's processes and API server readiness`;

async function cli(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      nodes: { type: "string" },
      dir: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  const command = positionals[0];
  if (values.help || !command || positionals.length > 1) {
    console.log(USAGE);
    return values.help ? 0 : 2;
  }
  const dir = resolve(values.dir ?? defaultClusterDir());
  switch (command) {
    case "up": {
      const nodes = values.nodes === undefined ? DEFAULT_NODES : Number(values.nodes);
      const abort = new AbortController();
      const onSignal = () => abort.abort(new Error("interrupted"));
      Deno.addSignalListener("SIGINT", onSignal);
      Deno.addSignalListener("SIGTERM", onSignal);
      const startedMs = performance.now();
      try {
        const info = await startCluster({ dir, nodes, signal: abort.signal, outliveProcess: true });
        const seconds = ((performance.now() - startedMs) / 1000).toFixed(1);
        // Shell input: comments and two exports, so `eval "$(deno task cluster:up)"` sets both.
        const dirFlag = values.dir ? ` --dir ${dir}` : "";
        console.log(
          `# cluster up in ${seconds}s: ${info.server} (${nodes} kwok node${
            nodes === 1 ? "" : "s"
          }); stop it with: deno task cluster:down${dirFlag}`,
        );
        console.log(`# other shells: eval "$(deno task cluster:env${dirFlag})"`);
        console.log(exportLines(info));
      } finally {
        Deno.removeSignalListener("SIGINT", onSignal);
        Deno.removeSignalListener("SIGTERM", onSignal);
      }
      return 0;
    }
    case "env": {
      const info = await readClusterInfo(dir);
      if (!info) {
        console.error(`no cluster recorded in ${dir}: start one with deno task cluster:up`);
        return 1;
      }
      console.log(exportLines(info));
      return 0;
    }
    case "down": {
      const info = await readClusterInfo(dir);
      await stopCluster(dir);
      console.log(info ? `cluster in ${dir} stopped` : `no cluster recorded in ${dir}`);
      return 0;
    }
    case "status":
      return await status(dir);
    default:
      console.error(`unknown command ${command}\n${USAGE}`);
      return 2;
  }
}

async function status(dir: string): Promise<number> {
  const info = await readClusterInfo(dir);
  if (!info) {
    console.log(`no cluster recorded in ${dir}`);
    return 1;
  }
  let healthy = true;
  console.log(
    `dir:        ${info.dir}\nserver:     ${info.server}\nkubeconfig: ${info.kubeconfig}`,
  );
  for (const name of [...COMPONENTS, WATCHDOG]) {
    const pid = (await readPidFile(join(dir, "run", `${name}.pid`))) ?? info.pids[name];
    const alive = pid !== undefined && isAlive(pid) && belongsTo(pid, dir);
    healthy &&= alive;
    console.log(`${name.padEnd(24)} ${alive ? "running" : "NOT RUNNING"} (pid ${pid ?? "-"})`);
  }
  let readyz: string;
  try {
    readyz = await withApi(info, async (api) => {
      const res = await api("GET", "/readyz");
      return res.status === 200 ? "ok" : `HTTP ${res.status}`;
    });
  } catch (err) {
    readyz = errorText(err);
  }
  healthy &&= readyz === "ok";
  console.log(`${"readyz".padEnd(24)} ${readyz}`);
  return healthy ? 0 : 1;
}

if (import.meta.main) {
  try {
    Deno.exit(await cli(Deno.args));
  } catch (err) {
    console.error(err instanceof Error ? err.message : err);
    Deno.exit(1);
  }
}
