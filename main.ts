/**
 * appservice-operator entry point: flags → configuration → a {@link Manager} with the AppService
 * controller (lib/appservice/controller.ts) → {@link Manager.run}, and the exit
 * code. Every start-up failure (bad flag, unusable kubeconfig, unreachable apiserver, rejected
 * credential) ends with one line on stderr and exit code 1, never a stack trace.
 *
 * @module
 */
// First, for its side effect: the TLS set-up starts before the other modules are evaluated.
import "./lib/kube/warm_start.ts";
import { type FlagValues, helpText, parseFlags, VERSION } from "./lib/cli.ts";
import { KubeClient, type KubeObject, type RequestInfo } from "./lib/kube/client.ts";
import { loadClusterConfig } from "./lib/kube/config.ts";
import { ConnectionHealth } from "./lib/kube/connection.ts";
import { ApiError, ConfigError, networkErrorIn, networkErrorReason } from "./lib/kube/errors.ts";
import { describeProxy } from "./lib/kube/proxy.ts";
import { Manager, type ManagerOptions } from "./lib/runtime/manager.ts";
import { ListenError } from "./lib/runtime/health.ts";
import { addAppServiceController } from "./lib/appservice/controller.ts";
import { logFinalizerPolicy } from "./lib/appservice/policy.ts";
import { Metrics } from "./lib/runtime/metrics.ts";
import { leaderElectionClient, reviewClient } from "./lib/runtime/clients.ts";
import { errorText, log, type Logger, setupLogging } from "./lib/runtime/log.ts";
import { MEMORY_DEBUG_ADDRESS_ENV, serveMemoryDebug } from "./lib/runtime/memory_debug.ts";
import { parseBindAddress } from "./lib/runtime/health.ts";
import { requestSpan, TRACER_NAME, tracingEnabled } from "./lib/runtime/tracing.ts";

/**
 * Set to `1` (tests/e2e/harness.ts does), the informers' caches are deep-frozen, so that code
 * mutating a cached object throws (`ManagerOptions.freezeCache`). Debug only.
 */
const FREEZE_CACHE_ENV = "APPSERVICE_DEBUG_FREEZE_CACHE";

/** Prints one line on stderr and exits 1. */
function fail(message: string): never {
  console.error(`error: ${message}`);
  Deno.exit(1);
}

/** Who the apiserver says we are (authentication.k8s.io/v1 SelfSubjectReview), or why not. */
async function whoAmI(client: KubeClient): Promise<string> {
  const source = client.config.source;
  const server = client.config.server;
  const signal = AbortSignal.timeout(15_000);
  try {
    const r = await client.create<KubeObject & { status?: { userInfo?: { username?: string } } }>(
      {
        apiVersion: "authentication.k8s.io/v1",
        kind: "SelfSubjectReview",
        plural: "selfsubjectreviews",
        namespaced: false,
      },
      { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" },
      { signal },
    );
    const user = r.status?.userInfo?.username ?? "";
    if (!user || user === "system:anonymous") {
      throw new ConfigError(
        `the apiserver ${server} treats ${source} as anonymous; refusing to run`,
      );
    }
    return user;
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    if (err instanceof ApiError) {
      if (err.code === 401) {
        throw new ConfigError(
          `the apiserver ${server} rejected the credential of ${source} (401 Unauthorized)`,
        );
      }
      if (err.code === 404 || err.code === 403) return "(unknown: SelfSubjectReview not available)";
      throw new ConfigError(
        `the apiserver ${server} answered ${err.code} ${err.reason}: ${err.status?.message ?? ""}`
          .trim(),
      );
    }
    // A dead proxy is named, not blamed on the apiserver.
    const via = client.proxy.url ? ` through proxy ${describeProxy(client.proxy)}` : "";
    throw new ConfigError(
      `cannot reach the apiserver ${server}${via} (${source}): ${
        networkErrorIn(err)?.reason ?? networkErrorReason(err)
      }`,
    );
  }
}

/** The reconcilers' client and the clients of their own beside it, with one connection health. */
interface Clients {
  /** Informers, reconcilers, Events (gets the Lease's write fence). */
  client: KubeClient;
  /** The Lease's. */
  leaderClient: KubeClient;
  /** Secure /metrics' reviews; with `--metrics-secure` only. */
  authClient?: KubeClient;
  /** The path to the apiserver as the reconcilers' and the Lease's requests see it. */
  health: ConnectionHealth;
}

/**
 * The clients from the flags' kubeconfig; every request counted and timed
 * (rest_client_requests_total, rest_client_request_duration_seconds) and, at debug level, logged with its send time, Retry-After and Audit-Id (the apiserver's audit
 * log ID), so a throttled run can be read against the audit log.
 * @throws ConfigError for an unusable kubeconfig or in-cluster configuration
 */
function makeClients(v: FlagValues, metrics: Metrics): Clients {
  const requestLog = log("client");
  const onRequest = (clientName: string) => (r: RequestInfo) => {
    metrics.recordRequest(r);
    requestLog.debug("Request", { client: clientName, ...r });
  };
  const userAgent =
    `appservice-operator/${VERSION} (${Deno.build.os}/${Deno.build.arch}) deno/${Deno.version.deno}`;
  const config = loadClusterConfig({
    kubeconfig: v["kubeconfig"] || undefined,
    context: v["context"] || undefined,
    serviceAccountDir: Deno.env.get("APPSERVICE_SERVICE_ACCOUNT_DIR") || undefined,
  });
  // One view of the path to the apiserver for both clients: a Lease attempt that gets no answer,
  // or one that gets through again, tells about the reconcilers' and watches' connections too.
  const health = new ConnectionHealth();
  const client = new KubeClient(config, {
    userAgent,
    qps: v["kube-api-qps"],
    burst: v["kube-api-burst"] || undefined,
    maxRetries: 2,
    onRequest: onRequest("main"),
    // A span per request made under a reconcile's span; with tracing off, none at all.
    requestScope: tracingEnabled() ? requestSpan : undefined,
    onSendWrite: (r) => requestLog.debug("Sending", r),
    health,
  });
  // The Lease's and the metrics reviews' clients of their own, with the runtime's defaults
  // (lib/runtime/clients.ts); here only their user agent and request metrics are added.
  const leaderClient = leaderElectionClient(config, {
    userAgent: `${userAgent} leader-election`,
    onRequest: onRequest("leader-election"),
    health,
  });
  // The reviews' connection health is their own: scrapes do not decide `/readyz`.
  const authClient = v["metrics-secure"]
    ? reviewClient(config, {
      userAgent: `${userAgent} metrics-auth`,
      onRequest: (r) => metrics.recordRequest(r),
    })
    : undefined;
  return { client, leaderClient, authClient, health };
}

/**
 * The Lease holder identity, `<Pod name>_<8 random hex>`: deploy/'s Lease-holder admission policy
 * compares its prefix with the Pod name of the request's bound ServiceAccount token (docs/security.md,
 * "Server-side fence"). The Pod name comes from APPSERVICE_POD_NAME (the downward API in
 * deploy/deployment.yaml), else the hostname (a Pod's hostname is its name, cut to 63 chars).
 */
function holderIdentity(): string {
  let hostname = "localhost";
  try {
    hostname = Deno.hostname();
  } catch { /* --allow-sys=hostname not granted: keep the fallback */ }
  const podName = Deno.env.get("APPSERVICE_POD_NAME") || hostname;
  return `${podName}_${crypto.randomUUID().slice(0, 8)}`;
}

/**
 * Who we are, asked beside the informers' first lists (the manager's start gate): nothing is
 * served, elected or written before the answer, and a refusal ends the start-up in one line.
 */
function connected(client: KubeClient, logger: Logger): Promise<void> {
  const config = client.config;
  return whoAmI(client).then((user) =>
    logger.info("Connected", {
      version: VERSION,
      server: config.server,
      // Which proxy carries the requests to the apiserver (client-go's rules: proxy.ts).
      proxy: describeProxy(client.proxy),
      // Unreadable proxy variables are applied by Deno's fetch by its own rules.
      ...(client.proxyEnvironment.unreadable
        ? { proxyEnvironment: `not read: ${client.proxyEnvironment.unreadable}` }
        : {}),
      source: config.source,
      user,
    })
  );
}

/**
 * A signal aborted by the first SIGTERM or SIGINT; a second signal a moment later exits at once
 * (1). The same signal can arrive twice at once (sent to the process group and forwarded by a
 * wrapper such as `deno task`): within 1 s it counts once.
 */
function stopOnSignals(logger: Logger): AbortSignal {
  const stop = new AbortController();
  let firstSignalMs = 0;
  const onSignal = (name: string) => () => {
    if (stop.signal.aborted && Date.now() - firstSignalMs < 1_000) return;
    if (stop.signal.aborted) {
      logger.warn("Second signal; exiting now", { signal: name });
      Deno.exit(1);
    }
    firstSignalMs = Date.now();
    logger.info("Signal received; shutting down", { signal: name });
    stop.abort();
  };
  Deno.addSignalListener("SIGTERM", onSignal("SIGTERM"));
  Deno.addSignalListener("SIGINT", onSignal("SIGINT"));
  return stop.signal;
}

/** The manager's options from the flags; the manager fills in what is left empty. */
function managerOptions(
  v: FlagValues,
  c: Clients,
  metrics: Metrics,
  startGate: Promise<unknown>,
): ManagerOptions {
  return {
    client: c.client,
    leaderElectionClient: c.leaderClient,
    metrics,
    // kubebuilder's convention: :8443 for HTTPS, :8080 for plain HTTP.
    metricsBindAddress: v["metrics-bind-address"] || (v["metrics-secure"] ? ":8443" : ":8080"),
    metricsSecure: v["metrics-secure"],
    metricsCertDir: v["metrics-cert-dir"],
    metricsAuthClient: c.authClient,
    healthProbeBindAddress: v["health-probe-bind-address"],
    leaderElect: v["leader-elect"],
    leaderElectionNamespace: v["leader-election-namespace"], // "": the client's namespace
    leaderElectionId: v["leader-election-id"],
    shards: v["shards"],
    leaseDurationSeconds: v["leader-elect-lease-duration"] / 1000,
    renewDeadlineMs: v["leader-elect-renew-deadline"],
    retryPeriodMs: v["leader-elect-retry-period"],
    identity: holderIdentity(),
    maxConcurrentReconciles: Math.max(1, v["max-concurrent-reconciles"]),
    reconcileTimeoutMs: v["reconcile-timeout"],
    syncPeriodMs: v["sync-period"],
    gracefulShutdownTimeoutMs: v["graceful-shutdown-timeout"],
    watchNamespace: v["watch-namespace"],
    watchIdleTimeoutMs: v["watch-idle-timeout"],
    listPageSize: v["list-page-size"],
    useWatchList: v["watch-list"],
    startGate,
    // Debug only (the end-to-end tests): a mutation of a cached object throws.
    freezeCache: Deno.env.get(FREEZE_CACHE_ENV) === "1",
  };
}

/**
 * One line on tracing at start-up (docs/operations.md, "Traces"): on, or asked for by the
 * environment (`OTEL_DENO`/`OTEL_DENO_TRACING`) while Deno does not trace, as in a binary made by
 * `deno compile` without `OTEL_DENO=true`, where Deno fixes the switch at compile time.
 */
function logTracing(logger: Logger): void {
  if (tracingEnabled()) {
    logger.info("Tracing reconciles (OpenTelemetry)", { tracer: TRACER_NAME });
    return;
  }
  const env = (name: string) => {
    try {
      return Deno.env.get(name)?.toLowerCase();
    } catch {
      return undefined; // not in --allow-env
    }
  };
  const asked = (env("OTEL_DENO_TRACING") ?? env("OTEL_DENO")) === "true";
  if (asked && env("OTEL_SDK_DISABLED") !== "true") {
    logger.warn(
      "OTEL_DENO=true, but this runtime does not trace: a binary made by deno compile keeps the OpenTelemetry setting it was compiled with; run with deno run (the deno-run image) to trace",
    );
  }
}

/** Debug only (deno task bench): a memory report on its own address; unset in production. */
function serveDebug(logger: Logger, signal: AbortSignal): void {
  let debugAddr;
  try {
    debugAddr = parseBindAddress(Deno.env.get(MEMORY_DEBUG_ADDRESS_ENV) ?? "");
  } catch (err) {
    fail(`${MEMORY_DEBUG_ADDRESS_ENV}: ${errorText(err)}`);
  }
  if (debugAddr) {
    const port = serveMemoryDebug(debugAddr.hostname, debugAddr.port, signal);
    logger.info("Serving the debug memory report", { path: "/debug/memory", port });
  }
}

async function main(): Promise<number> {
  let parsed;
  try {
    parsed = parseFlags(Deno.args);
  } catch (err) {
    fail(`${errorText(err)} (see --help)`);
  }
  if (parsed.kind === "help") {
    console.log(helpText());
    return 0;
  }
  if (parsed.kind === "version") {
    console.log(`appservice-operator ${VERSION}`);
    return 0;
  }
  const v = parsed.values;
  await setupLogging(v["log-level"], v["log-format"]);
  const logger = log("main");
  logTracing(logger);
  const metrics = new Metrics();
  let clients: Clients;
  try {
    clients = makeClients(v, metrics);
  } catch (err) {
    if (err instanceof ConfigError) fail(err.message);
    fail(errorText(err));
  }
  const gate = connected(clients.client, logger);
  const stop = stopOnSignals(logger);
  // One line on whether the apiserver adds the finalizer at create (deploy/finalizer_policy.yaml);
  // after the start gate, beside the informers' start, and never a reason to stop.
  gate.then(
    () =>
      logFinalizerPolicy(
        clients.client,
        logger,
        AbortSignal.any([stop, AbortSignal.timeout(15_000)]),
      ),
    () => {},
  ).catch(() => {});
  const manager = new Manager(managerOptions(v, clients, metrics, gate));
  addAppServiceController(manager);
  const debugStop = new AbortController();
  serveDebug(logger, debugStop.signal);
  try {
    return await manager.run(stop);
  } catch (err) {
    if (err instanceof ConfigError) fail(err.message);
    if (err instanceof ListenError) {
      const flag = err.server === "health" ? "health-probe-bind-address" : "metrics-bind-address";
      fail(`${err.message}; choose another address with --${flag} (or 0 to turn it off)`);
    }
    return fail(errorText(err));
  } finally {
    debugStop.abort();
    clients.client.close();
    clients.leaderClient.close();
    clients.authClient?.close();
    clients.health.close();
  }
}

if (import.meta.main) {
  const code = await main();
  Deno.exit(code);
}
