/**
 * Start, stop, restart and inspect a local cluster: the lower-level API under
 * `ControlPlane` (mod.ts exports both; tests/cluster/cluster.ts re-exports this one).
 * @module
 */

import { join, resolve } from "node:path";
import {
  createNode,
  etcdHealthy,
  etcdPost,
  isNodeReady,
  type NodeLike,
  waitApiserverReady,
  withApi,
} from "./api.ts";
import {
  apiserverArgv,
  controllerManagerArgv,
  etcdArgv,
  featureGatesArgv,
  kwokArgv,
  schedulerArgv,
} from "./argv.ts";
import {
  CLUSTER_READY_TIMEOUT_MS,
  type ClusterInfo,
  type Component,
  COMPONENTS,
  DEFAULT_APISERVER_DOWN_MS,
  DEFAULT_NODES,
  ETCD_READY_TIMEOUT_MS,
  KILL_WAIT_MS,
  REPO,
  type StartClusterOptions,
  WATCHDOG,
} from "./config.ts";
import {
  ensureBinaries,
  freePorts,
  resetClusterDir,
  writeClusterInfo,
  writeConfigFiles,
} from "./files.ts";
import { makePki } from "./pki.ts";
import {
  belongsTo,
  isAlive,
  readPidFile,
  startComponent,
  startSupervisor,
  supervisors,
  terminateGroups,
  waitFor,
} from "./processes.ts";
import { errorText, exists, sleep, withTimeout } from "./util.ts";

/**
 * Builds (or finds cached) binaries, then starts a fresh cluster in `opts.dir` and waits until the
 * API server is ready and, with `components: "full"` (the default), the `default` ServiceAccount
 * exists in namespace `default` and every kwok Node is Ready. A cluster left running in the same
 * folder is stopped first, and the folder's previous state (etcd data, certificates, logs) is
 * removed. `opts.featureGates` go to kube-apiserver's command line (and so into
 * `ClusterInfo.apiserverArgs`, which {@linkcode restartApiserver} reuses).
 *
 * On failure everything started is stopped and the Error names the component and carries the
 * last lines of its log. `startControlPlane` (control_plane.ts) wraps this with a client,
 * identities, CRDs and the audit log.
 * @throws RangeError for `nodes` outside 0..1000, nodes with `components: "minimal"`, or a
 *   feature gate name other than letters and digits
 */
export async function startCluster(opts: StartClusterOptions = {}): Promise<ClusterInfo> {
  const signal = opts.signal;
  const components = opts.components ?? "full";
  const full = components === "full";
  const nodes = opts.nodes ?? (full ? DEFAULT_NODES : 0);
  if (!Number.isInteger(nodes) || nodes < 0 || nodes > 1000) {
    throw new RangeError(`nodes must be an integer in 0..1000, got ${nodes}`);
  }
  if (!full && nodes > 0) {
    throw new RangeError(`nodes need kwok: components "minimal" runs none, got nodes ${nodes}`);
  }
  const dir = resolve(opts.dir ?? defaultClusterDir());
  const featureGates = { ...opts.featureGates };
  featureGatesArgv(featureGates); // a bad name is an error before anything is stopped or built
  signal?.throwIfAborted();

  await stopCluster(dir);
  await resetClusterDir(dir);
  const binDir = await ensureBinaries(signal, full ? [] : ["etcd", "kube-apiserver"]);
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
    components,
    ...(Object.keys(featureGates).length > 0 ? { featureGates } : {}),
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
    if (!full) {
      if (opts.outliveProcess) await Deno.writeTextFile(join(dir, "run", "detached"), "");
      await writeClusterInfo(info);
      return info;
    }

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
 * The components the control plane `info` runs, in start order: {@linkcode COMPONENTS} for
 * `components: "full"` (also a `cluster.json` without the field), etcd and kube-apiserver for
 * `"minimal"` (see {@linkcode ControlPlaneComponents}). A health check of a running plane checks
 * these, not all of {@linkcode COMPONENTS}.
 */
export function componentsOf(info: Pick<ClusterInfo, "components">): readonly Component[] {
  return (info.components ?? "full") === "full" ? COMPONENTS : ["etcd", "kube-apiserver"];
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

/**
 * The clone's own state folder, `<repo>/.cache`: running clusters (their PKI, data, logs and
 * pid files) live here, never in {@link cacheDir}, which `APPSERVICE_CACHE_DIR` may share between
 * clones — two clones' test runs must not stop each other's control plane.
 */
export function stateDir(): string {
  return join(REPO, ".cache");
}

/** The default cluster folder: `<stateDir()>/cluster`. */
export function defaultClusterDir(): string {
  return join(stateDir(), "cluster");
}
