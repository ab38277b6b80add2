/**
 * The two operators under test as child processes: ours (`deno run <the permission flags of
 * deno task start> main.ts`) and the controller-runtime peer (the Go binary built from
 * bench/peer). Both get the same flags where both have the setting, bind their probe and metrics
 * servers on 127.0.0.1, and write their logs to a file (not into this process's memory).
 *
 * @module
 */
import { dirname, join } from "node:path";
import { freePort, REPO, startPermissionFlags, stopChild } from "../../tests/cluster/host.ts";
import { type ProcSample, procSample } from "./proc.ts";

/** Which implementation. */
export type OperatorKind = "ours" | "peer";

/** User-Agent prefix of each operator's requests (how the audit log tells them apart). */
export const AGENT_PREFIX: Record<OperatorKind, string> = {
  ours: "appservice-operator/",
  peer: "appservice-peer/",
};

/**
 * User-Agent prefixes of the control plane's components that write because an operator created
 * Pods (the scheduler binds each Pod, kwok writes its status): their writes share the apiserver with
 * the operator's during a converge, so the benchmark counts them beside the operator's.
 */
export const CLUSTER_AGENTS: readonly string[] = ["kube-scheduler/", "kwok/"];

/** Settings given to both implementations alike. */
export interface OperatorSettings {
  kubeconfig: string;
  maxConcurrentReconciles: number;
  /** "" for all namespaces. */
  watchNamespace?: string;
  leaderElect?: boolean;
  leaderElectionNamespace?: string;
  leaderElectionId?: string;
  leaseDurationSeconds?: number;
  renewDeadlineSeconds?: number;
  retryPeriodSeconds?: number;
  /** Client-side QPS (0: none, the default of both). */
  kubeApiQps?: number;
  /** Ours only: `--shards` (namespace shards, issue 30); unset: not sharded. */
  shards?: number;
}

/** A running operator process. */
export interface OperatorProcess {
  kind: OperatorKind;
  pid: number;
  /** `performance.now()` just before the spawn. */
  spawnedAt: number;
  healthPort: number;
  metricsPort: number;
  /** Ours: port of the debug memory report (lib/runtime/memory_debug.ts). */
  debugPort?: number;
  logFile: string;
  /** Whether the process has exited. */
  readonly exited: boolean;
  /** RSS and CPU now (undefined once exited). */
  sample(): ProcSample | undefined;
  /** One GET /readyz: true on 200. */
  isReady(): Promise<boolean>;
  /** Polls /readyz every 25 ms; resolves with ms from spawn to the first 200. */
  waitReady(timeoutMs: number): Promise<number>;
  /** GET /metrics. */
  metrics(): Promise<string>;
  /** Sends `signal` (default SIGTERM), SIGKILL after `timeoutMs`; resolves the exit code. */
  stop(signal?: Deno.Signal, timeoutMs?: number): Promise<number>;
}

let permsCache: string[] | undefined;

/** Path of the peer binary in the cache. */
export function peerBinary(cacheDir: string): string {
  return join(cacheDir, "bench", "appservice-peer");
}

/**
 * Builds the peer (`go build` in bench/peer) into the cache with {@link goBuild}.
 * @throws Error with the compiler output on failure.
 */
export function buildPeer(cacheDir: string): Promise<string> {
  return goBuild("peer", peerBinary(cacheDir));
}

/**
 * `go build -trimpath -o out .` in bench/`dir` (a Go module of its own); resolves `out`. Uses
 * `$GO`, else `go` on PATH, else /usr/local/go/bin/go. @throws Error with the compiler output on
 * failure.
 */
export async function goBuild(dir: string, out: string): Promise<string> {
  await Deno.mkdir(dirname(out), { recursive: true });
  const candidates = [Deno.env.get("GO"), "go", "/usr/local/go/bin/go"].filter(Boolean);
  let lastErr: unknown;
  for (const go of candidates) {
    try {
      const r = await new Deno.Command(go!, {
        args: ["build", "-trimpath", "-o", out, "."],
        cwd: join(REPO, "bench", dir),
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      }).output();
      if (!r.success) {
        throw new Error(`go build in bench/${dir} failed:\n${new TextDecoder().decode(r.stderr)}`);
      }
      return out;
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) {
        lastErr = err;
        continue;
      }
      throw err;
    }
  }
  throw new Error(`no go command found (set GO): ${lastErr}`);
}

/** Runs `deno run <perms> main.ts --version` once, so module transpiling is cached. */
export async function warmOurs(): Promise<void> {
  const perms = permsCache ??= await startPermissionFlags();
  await new Deno.Command(Deno.execPath(), {
    args: ["run", ...perms, join(REPO, "main.ts"), "--version"],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).output();
}

function flagsFor(s: OperatorSettings): string[] {
  const f = [
    `--kubeconfig=${s.kubeconfig}`,
    `--max-concurrent-reconciles=${s.maxConcurrentReconciles}`,
  ];
  if (s.watchNamespace) f.push(`--watch-namespace=${s.watchNamespace}`);
  if (s.kubeApiQps) f.push(`--kube-api-qps=${s.kubeApiQps}`);
  if (s.shards) f.push(`--shards=${s.shards}`);
  if (s.leaderElect) {
    f.push(
      "--leader-elect=true",
      `--leader-election-namespace=${s.leaderElectionNamespace ?? "default"}`,
      `--leader-election-id=${s.leaderElectionId ?? "bench"}`,
      `--leader-elect-lease-duration=${s.leaseDurationSeconds ?? 15}s`,
      `--leader-elect-renew-deadline=${s.renewDeadlineSeconds ?? 10}s`,
      `--leader-elect-retry-period=${s.retryPeriodSeconds ?? 2}s`,
    );
  }
  return f;
}

/**
 * Starts one operator process. `logDir` receives `<kind>-<label>.log` (stdout and stderr). Ours
 * runs with `deno task start`'s flags (plus `denoFlags`, for experiments) and serves its debug
 * memory report on 127.0.0.1 ({@link OperatorProcess.debugPort}).
 */
export async function startOperatorProcess(
  kind: OperatorKind,
  settings: OperatorSettings,
  opts: {
    cacheDir: string;
    logDir: string;
    label: string;
    denoFlags?: string[];
    /** `APPSERVICE_POD_NAME`: the start of its Lease identity (`<podName>_<8 hex>`). */
    podName?: string;
  },
): Promise<OperatorProcess> {
  const healthPort = freePort();
  const metricsPort = freePort();
  const debugPort = kind === "ours" ? freePort() : undefined;
  const common = [
    ...flagsFor(settings),
    `--health-probe-bind-address=127.0.0.1:${healthPort}`,
    `--metrics-bind-address=127.0.0.1:${metricsPort}`,
  ];
  let cmd: string;
  let args: string[];
  if (kind === "ours") {
    const perms = permsCache ??= await startPermissionFlags();
    cmd = Deno.execPath();
    // Plain /metrics, as the peer serves it (the bench reads it without a token).
    args = [
      "run",
      ...perms,
      ...(opts.denoFlags ?? []),
      join(REPO, "main.ts"),
      ...common,
      "--metrics-secure=false",
    ];
  } else {
    cmd = peerBinary(opts.cacheDir);
    args = common;
  }
  await Deno.mkdir(opts.logDir, { recursive: true });
  const logFile = join(opts.logDir, `${kind}-${opts.label}.log`);
  const log = await Deno.open(logFile, { write: true, create: true, truncate: true });
  const spawnedAt = performance.now();
  const child = new Deno.Command(cmd, {
    args,
    env: {
      KUBECONFIG: "",
      ...(opts.podName ? { APPSERVICE_POD_NAME: opts.podName } : {}),
      ...(debugPort ? { APPSERVICE_DEBUG_MEMORY_ADDRESS: `127.0.0.1:${debugPort}` } : {}),
    },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  // Both streams into one file; the file is closed when both end.
  const w = log.writable.getWriter();
  const pump = async (s: ReadableStream<Uint8Array>) => {
    for await (const chunk of s) await w.write(chunk);
  };
  const pumps = Promise.all([pump(child.stdout), pump(child.stderr)]).finally(() =>
    w.close().catch(() => {})
  );
  let exited = false;
  const status = child.status.then(async (s) => {
    exited = true;
    await pumps.catch(() => {});
    return s;
  });
  const base = `http://127.0.0.1:${healthPort}`;
  const proc: OperatorProcess = {
    kind,
    pid: child.pid,
    spawnedAt,
    healthPort,
    metricsPort,
    debugPort,
    logFile,
    get exited() {
      return exited;
    },
    sample: () => (exited ? undefined : procSample(child.pid)),
    async isReady() {
      try {
        const r = await fetch(`${base}/readyz`, { signal: AbortSignal.timeout(2_000) });
        await r.body?.cancel();
        return r.status === 200;
      } catch {
        return false;
      }
    },
    async waitReady(timeoutMs: number) {
      const deadline = performance.now() + timeoutMs;
      for (let i = 0; i < 1_000_000 && performance.now() < deadline; i++) {
        if (exited) throw new Error(`${kind} exited before ready; see ${logFile}`);
        if (await proc.isReady()) return performance.now() - spawnedAt;
        await new Promise((r) => setTimeout(r, 25));
      }
      throw new Error(`${kind} not ready within ${timeoutMs} ms; see ${logFile}`);
    },
    async metrics() {
      const r = await fetch(`http://127.0.0.1:${metricsPort}/metrics`, {
        signal: AbortSignal.timeout(5_000),
      });
      return await r.text();
    },
    stop: (signal: Deno.Signal = "SIGTERM", timeoutMs = 45_000) =>
      stopChild(child, status, signal, timeoutMs),
  };
  return proc;
}

/** Whether `/metrics` text reports `leader_election_master_status ... 1`. */
export function isLeaderByMetrics(metricsText: string): boolean {
  return /^leader_election_master_status\{[^}]*\}\s+1(\s|$)/m.test(metricsText);
}
