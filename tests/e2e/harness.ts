/**
 * Shared helpers of the end-to-end tests: the running local control plane (started by
 * `tests/run.ts` and named by `APPSERVICE_TEST_CLUSTER_DIR`), an admin client, a namespace per
 * test, the CRD, and the operator run as a child process with the same permission flags as
 * `deno task start`. Every wait is bounded in time; every address is on 127.0.0.1.
 *
 * @module
 */
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import { parse as parseYaml, stringify } from "yaml";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import {
  CRDS,
  LEASES,
  NAMESPACES,
  PODS,
  type ResourceType,
  SERVICES,
} from "../../lib/kube/resources.ts";
import { type AppService, APPSERVICES, FINALIZER } from "../../lib/appservice/schema.ts";
import { type ClusterInfo, connectControlPlane, type ControlPlane } from "../../lib/testing/mod.ts";
import { defaultClusterDir } from "../cluster/cluster.ts";
import {
  applyFinalizerPolicy,
  WITHOUT_POLICY_LABEL,
  WITHOUT_POLICY_VALUE,
} from "../cluster/finalizer_policy.ts";
import { freePort, REPO, startPermissionFlags, stopChild } from "../cluster/host.ts";
import { AssertionError, isAssertionError } from "../assert.ts";

// Shared with bench/ (which must not import this harness): see tests/cluster/host.ts.
export { freePort, REPO, startPermissionFlags, stopChild };

let plane: ControlPlane | undefined;

/**
 * The running test control plane (lib/testing's {@link ControlPlane}, connected to the folder in
 * `APPSERVICE_TEST_CLUSTER_DIR`, else `deno task cluster:up`'s default), or an Error telling how
 * to start one. Its admin client has the user agent `appservice-e2e`.
 */
export async function controlPlane(): Promise<ControlPlane> {
  if (plane) return plane;
  const dir = Deno.env.get("APPSERVICE_TEST_CLUSTER_DIR") || defaultClusterDir();
  try {
    plane = await connectControlPlane(dir, { clientOptions: { userAgent: "appservice-e2e" } });
  } catch (err) {
    if (!/no control plane recorded/.test((err as Error).message)) throw err;
    throw new Error(
      "no local control plane: run the tests with `deno task test` (or start one with `deno task cluster:up` and set APPSERVICE_TEST_CLUSTER_DIR)",
    );
  }
  return plane;
}

/** What the running test control plane's `cluster.json` records (see {@link controlPlane}). */
export async function cluster(): Promise<ClusterInfo> {
  return (await controlPlane()).info;
}

/**
 * The apiserver's own /metrics (Prometheus text), through the admin kubeconfig and kubectl.
 * @throws Error with kubectl's stderr when it fails
 */
export async function apiserverMetrics(): Promise<string> {
  const info = await cluster();
  const out = await new Deno.Command(`${info.binDir}/kubectl`, {
    args: ["--kubeconfig", info.kubeconfig, "get", "--raw", "/metrics"],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) throw new Error(new TextDecoder().decode(out.stderr));
  return new TextDecoder().decode(out.stdout);
}

/** An admin client for the test cluster (the same one on every call). */
export async function admin(): Promise<KubeClient> {
  return (await controlPlane()).client();
}

/** Sleeps `ms`. */
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Polls `fn` every `intervalMs` until it returns a value other than undefined/false, at most
 * `timeoutMs`. Any other throw of `fn` means "not yet", but a failed assertion
 * ({@link isAssertionError}) is rethrown at once: an `assert` inside a predicate fails the test.
 * @throws the assertion error of `fn`, or an Error naming `what` and the last value or error on
 * timeout.
 */
export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 60_000,
  intervalMs = 250,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (let i = 0; i < 100_000; i++) {
    try {
      const v = await fn();
      if (v !== undefined && v !== false) return v as T;
      last = v;
    } catch (err) {
      if (isAssertionError(err)) throw err;
      last = err;
    }
    if (Date.now() > deadline) break;
    await sleep(intervalMs);
  }
  throw new Error(
    `timed out after ${timeoutMs} ms waiting for ${what}; last: ${
      String((last as Error)?.message ?? JSON.stringify(last))
    }`,
  );
}

/**
 * Applies crd/appservice.yaml (server-side apply) and waits until it is Established; then
 * deploy/finalizer_policy.yaml as deploy/ installs it (tests/cluster/finalizer_policy.ts), its
 * binding leaving out namespaces made with `newNamespace(prefix, { finalizerPolicy: false })`,
 * and waits until the policy is in force.
 */
export async function installCrd(): Promise<void> {
  const c = await admin();
  const crd = parseYaml(await Deno.readTextFile(`${REPO}/crd/appservice.yaml`)) as KubeObject;
  await c.patch(CRDS, crd.metadata!.name!, crd, {
    type: "apply",
    fieldManager: "appservice-e2e",
    force: true,
  });
  await waitFor("CRD Established", async () => {
    const got = await c.get<
      KubeObject & { status?: { conditions?: { type: string; status: string }[] } }
    >(
      CRDS,
      crd.metadata!.name!,
    );
    return got.status?.conditions?.some((x) => x.type === "Established" && x.status === "True");
  }, 30_000);
  // Discovery can lag behind Established for a moment.
  await waitFor("AppService API served", async () => {
    await c.list(APPSERVICES as never, { namespace: "default", limit: 1 });
    return true;
  }, 30_000);
  await applyFinalizerPolicy(c, {
    fieldManager: "appservice-e2e",
    namespaceSelector: {
      matchExpressions: [{
        key: WITHOUT_POLICY_LABEL,
        operator: "NotIn",
        values: [WITHOUT_POLICY_VALUE],
      }],
    },
    probeNamespace: "default",
  });
}

/**
 * Creates a fresh namespace `e2e-<prefix>-<random>`; returns its name. With
 * `finalizerPolicy: false` it carries the label that leaves it out of the finalizer policy's
 * binding (see {@link installCrd}): AppServices there are created without the finalizer.
 */
export async function newNamespace(
  prefix: string,
  o: { finalizerPolicy?: boolean } = {},
): Promise<string> {
  const c = await admin();
  const name = `e2e-${prefix}-${crypto.randomUUID().slice(0, 6)}`;
  const labels = o.finalizerPolicy === false
    ? { [WITHOUT_POLICY_LABEL]: WITHOUT_POLICY_VALUE }
    : undefined;
  await c.create(NAMESPACES, { apiVersion: "v1", kind: "Namespace", metadata: { name, labels } });
  return name;
}

/**
 * Deletes a test namespace without waiting. AppServices left in it lose their finalizer first,
 * so a namespace never hangs when the operator is already stopped.
 */
export async function dropNamespace(ns: string): Promise<void> {
  const c = await admin();
  try {
    const list = await c.list<AppService>(APPSERVICES as never, { namespace: ns });
    for (const as of list.items) {
      if (as.metadata.finalizers?.includes(FINALIZER)) {
        await c.patch(APPSERVICES as never, as.metadata.name!, { metadata: { finalizers: null } }, {
          namespace: ns,
        }).catch(() => {});
      }
    }
  } catch { /* CRD may be absent */ }
  await c.delete(NAMESPACES, ns).catch((err) => {
    if (!isNotFound(err)) throw err;
  });
}

/** An AppService object for `create`. */
export function appService(ns: string, name: string, spec: Record<string, unknown>): AppService {
  return {
    apiVersion: "apps.our-org.com/v1",
    kind: "AppService",
    metadata: { name, namespace: ns },
    spec: spec as AppService["spec"],
  };
}

/**
 * Writes a copy of the admin kubeconfig to `${dir}/kubeconfig.yaml` with `server` as every
 * cluster's server (e.g. a proxy's or a second apiserver's URL) and `edit` applied to the parsed
 * document; returns the file's path.
 */
export async function kubeconfigFor(
  server: string,
  dir: string,
  // deno-lint-ignore no-explicit-any
  edit: (cfg: any) => void = () => {},
): Promise<string> {
  const info = await cluster();
  // deno-lint-ignore no-explicit-any
  const cfg = parseYaml(await Deno.readTextFile(info.kubeconfig)) as any;
  for (const cl of cfg.clusters) cl.cluster.server = server;
  edit(cfg);
  const file = `${dir}/kubeconfig.yaml`;
  await Deno.writeTextFile(file, stringify(cfg));
  return file;
}

/** A running operator process. */
export interface Operator {
  child: Deno.ChildProcess;
  healthPort: number;
  metricsPort: number;
  /** Log lines so far (JSON lines parsed where possible). */
  logs(): Record<string, unknown>[];
  /** Raw stderr so far. */
  stderr(): string;
  /** Waits until /readyz answers 200. */
  waitReady(timeoutMs?: number): Promise<void>;
  /**
   * GET /metrics text (plain HTTP: the harness's default `--metrics-secure=false`).
   * @throws Error on any status but 200
   */
  metrics(): Promise<string>;
  /** GET /readyz: status and body. */
  readyz(): Promise<{ status: number; body: string }>;
  /** Sends a signal and waits for exit; returns the exit code. */
  stop(signal?: Deno.Signal, timeoutMs?: number): Promise<number>;
  /** Resolves with the exit code when the process ends by itself. */
  status: Promise<Deno.CommandStatus>;
}

/**
 * Starts the operator (`deno run <start flags> main.ts`) against the test cluster.
 * @param args extra flags; `--kubeconfig` defaults to the admin kubeconfig
 * @param env extra environment
 * @param entry the program (default main.ts; e.g. an example controller taking the same
 *   `--kubeconfig`, `--health-probe-bind-address` and `--metrics-bind-address` flags)
 */
export async function startOperator(
  args: string[] = [],
  env: Record<string, string> = {},
  entry = `${REPO}/main.ts`,
): Promise<Operator> {
  const info = await cluster();
  const healthPort = freePort();
  const metricsPort = freePort();
  const perms = await startPermissionFlags();
  const hasKubeconfig = args.some((a) => a.startsWith("--kubeconfig"));
  // The operator's /metrics in plain HTTP (what `op.metrics()` reads), unless the test chooses the
  // mode itself; other programs (examples) have no such flag.
  const plainMetrics = entry === `${REPO}/main.ts` &&
    !args.some((a) => /^--(no-)?metrics-secure\b/.test(a));
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      ...perms,
      entry,
      ...(hasKubeconfig ? [] : [`--kubeconfig=${info.kubeconfig}`]),
      `--health-probe-bind-address=127.0.0.1:${healthPort}`,
      `--metrics-bind-address=127.0.0.1:${metricsPort}`,
      ...(plainMetrics ? ["--metrics-secure=false"] : []),
      ...args,
    ],
    // APPSERVICE_DEBUG_FREEZE_CACHE (main.ts): a mutation of a cached object throws.
    env: { KUBECONFIG: "", APPSERVICE_DEBUG_FREEZE_CACHE: "1", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let err = "";
  let out = "";
  const dec = new TextDecoder();
  const pump = async (s: ReadableStream<Uint8Array>, to: (t: string) => void) => {
    for await (const chunk of s) to(dec.decode(chunk, { stream: true }));
  };
  const pumps = Promise.all([
    pump(child.stderr, (t) => err += t),
    pump(child.stdout, (t) => out += t),
  ]);
  const status = child.status.then(async (s) => {
    await pumps;
    return s;
  });
  let exited = false;
  status.then(() => exited = true);
  const op: Operator = {
    child,
    healthPort,
    metricsPort,
    status,
    stderr: () => err + out,
    logs: () =>
      err.split("\n").filter((l) => l.startsWith("{")).map((l) => {
        try {
          return JSON.parse(l);
        } catch {
          return { raw: l };
        }
      }),
    async waitReady(timeoutMs = 60_000) {
      await waitFor("operator /readyz", async () => {
        if (exited) throw new Error(`operator exited: ${err.slice(-2000)}`);
        const r = await fetch(`http://127.0.0.1:${healthPort}/readyz`);
        await r.body?.cancel();
        return r.status === 200;
      }, timeoutMs);
    },
    async metrics() {
      const r = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
      const text = await r.text();
      if (r.status !== 200) throw new Error(`GET /metrics: ${r.status} ${text.slice(0, 200)}`);
      return text;
    },
    async readyz() {
      const r = await fetch(`http://127.0.0.1:${healthPort}/readyz`);
      return { status: r.status, body: await r.text() };
    },
    stop: (sig: Deno.Signal = "SIGTERM", timeoutMs = 45_000) =>
      stopChild(child, status, sig, timeoutMs),
  };
  return op;
}

/** Reads one AppService. */
export async function getAs(ns: string, name: string): Promise<AppService> {
  return await (await admin()).get<AppService>(APPSERVICES as never, name, { namespace: ns });
}

/** One parsed JSON log line of the operator (LogTape's JSON Lines format). */
export type LogLine = Record<string, unknown> & { properties?: Record<string, unknown> };

/** The operator's log lines with this `message`. */
export function logsOf(op: Operator, message: string): LogLine[] {
  return op.logs().filter((l) => l.message === message) as LogLine[];
}

/**
 * Sum of the samples of `name` whose labels include `labels` (Prometheus exposition text). A test
 * relies on the series it reads, so none matching is an error, unless `opts.absent` gives the
 * value to read instead (for a series that may rightly not exist yet, e.g. a count of 429s).
 * @throws Error naming the series when no sample matches and `opts.absent` is not given
 */
export function metricSum(
  text: string,
  name: string,
  labels: Record<string, string> = {},
  opts: { absent?: number } = {},
): number {
  let sum = 0;
  let found = false;
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][\w:]*)(\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have: Record<string, string> = {};
    for (const kv of (m[3] ?? "").matchAll(/(\w+)="([^"]*)"/g)) have[kv[1]] = kv[2];
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) {
      sum += Number(m[4]);
      found = true;
    }
  }
  if (found) return sum;
  if (opts.absent !== undefined) return opts.absent;
  throw new Error(`no series ${name}${JSON.stringify(labels)} in the metrics`);
}

/**
 * How often `op` has `change`d leadership (any Lease), from its
 * `appservice_leader_election_changes_total`; the series exists once it campaigns.
 */
export async function leaderChanges(
  op: Operator,
  change: "acquired" | "lost" | "released",
): Promise<number> {
  return metricSum(await op.metrics(), "appservice_leader_election_changes_total", { change });
}

/** The Lease identity an operator campaigns with (from its "Waiting for the Lease" line). */
export async function leaseIdentityOf(op: Operator): Promise<string> {
  return await waitFor(
    "operator identity",
    () => {
      const l = logsOf(op, "Waiting for the Lease")[0];
      return (l?.properties?.identity as string | undefined) ?? undefined;
    },
    60_000,
    100,
  );
}

/** Reads a Lease; undefined when absent. */
export async function getLease(ns: string, name: string): Promise<Lease | undefined> {
  try {
    return await (await admin()).get<Lease>(LEASES, name, { namespace: ns });
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

/** Whether the operator process is still running (it has not exited within 50 ms). */
export function isRunning(op: Operator): Promise<boolean> {
  return Promise.race([op.status.then(() => false), sleep(50).then(() => true)]);
}

/**
 * Deletes AppService `name` in `ns` and checks the order its finalizer promises: every Pod
 * labelled `app.kubernetes.io/instance=<name>` (and the Service `name`, with `service`) leaves the
 * API before the AppService does, and every version of the AppService seen until then still holds
 * the finalizer. Both are watched from a listing taken before the delete and the DELETED events'
 * resourceVersions are compared: the test cluster has one etcd, so these are revisions of one
 * sequence. Bounded by `timeoutMs`.
 * @throws AssertionError naming what went out of order; Error on timeout.
 */
export async function deleteInOrder(
  ns: string,
  name: string,
  opts: { service?: boolean; timeoutMs?: number } = {},
): Promise<void> {
  const c = await admin();
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const ctl = new AbortController();
  const deleted = new Map<string, number>(); // "Pod/x", "Service/x", "AppService/x" -> revision
  const pending = new Set<string>();
  const violations: string[] = [];
  let failure: unknown;
  const follow = async <T extends KubeObject>(
    kind: string,
    rt: ResourceType,
    sel: { labelSelector?: string; fieldSelector?: string },
    check: (o: T) => void = () => {},
  ) => {
    const l = await c.listAll<T>(rt, { namespace: ns, ...sel });
    for (const o of l.items) pending.add(`${kind}/${o.metadata!.name}`);
    // Wrapped: an async function returning the promise itself would wait for the watch to end.
    const done = (async () => {
      try {
        for await (
          const ev of c.watch<T>(rt, {
            namespace: ns,
            ...sel,
            resourceVersion: l.resourceVersion,
            timeoutSeconds: Math.ceil(timeoutMs / 1000) + 5,
            signal: ctl.signal,
          })
        ) {
          const key = `${kind}/${ev.object.metadata?.name}`;
          if (ev.type === "ADDED") pending.add(key);
          if (ev.type === "DELETED") deleted.set(key, Number(ev.object.metadata!.resourceVersion));
          else if (ev.type !== "BOOKMARK") check(ev.object);
        }
      } catch (err) {
        if (!ctl.signal.aborted) failure = err;
      }
    })();
    return { done };
  };
  const asKey = `AppService/${name}`;
  const watches = [
    await follow<KubeObject>("Pod", PODS, { labelSelector: `app.kubernetes.io/instance=${name}` }),
    await follow<AppService>("AppService", APPSERVICES as never, {
      fieldSelector: `metadata.name=${name}`,
    }, (a) => {
      if (!a.metadata.finalizers?.includes(FINALIZER)) {
        violations.push(`AppService ${name} lost its finalizer at ${a.metadata.resourceVersion}`);
      }
    }),
    ...(opts.service
      ? [await follow<KubeObject>("Service", SERVICES, { fieldSelector: `metadata.name=${name}` })]
      : []),
  ];
  try {
    await c.delete(APPSERVICES as never, name, { namespace: ns });
    await waitFor(`${asKey} and its ${[...pending].join(", ")} deleted`, () => {
      if (failure) throw failure;
      return [...pending].every((k) => deleted.has(k));
    }, timeoutMs);
  } finally {
    ctl.abort();
    await Promise.all(watches.map((w) => w.done));
  }
  const asGone = deleted.get(asKey)!;
  for (const [k, rv] of deleted) {
    if (k !== asKey && rv > asGone) {
      violations.push(`${k} deleted at revision ${rv}, after ${asKey} at ${asGone}`);
    }
  }
  if (violations.length > 0) throw new AssertionError(violations.join("\n"));
}
