/**
 * The HTTP endpoints of the process: `/healthz` and `/readyz` on the health-probe address,
 * `/metrics` on the metrics address (controller-runtime's `--health-probe-bind-address` and
 * `--metrics-bind-address`). A bind address is `host:port`, `:port` (all interfaces) or `0`
 * (disabled), as in controller-runtime.
 *
 * @module
 */

/** A parsed bind address; undefined means disabled. */
export interface BindAddress {
  /** Interface to listen on; `0.0.0.0` for `:port`. */
  hostname: string;
  /** TCP port; 0 picks a free one. */
  port: number;
}

/**
 * Parses `host:port`, `:port`, `[::1]:port` or `0`.
 * @throws Error naming the flag value when malformed.
 */
export function parseBindAddress(value: string): BindAddress | undefined {
  if (value === "0" || value === "") return undefined;
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(value);
  if (!m) throw new Error(`bind address "${value}" is not host:port, :port or 0`);
  const port = Number(m[3]);
  if (port > 65535) throw new Error(`bind address "${value}": port out of range`);
  return { hostname: m[1] ?? (m[2] || "0.0.0.0"), port };
}

/** Which of the Manager's servers a {@link ListenError} is about. */
export type ServerName = "health" | "metrics";

/**
 * A server of the Manager could not listen on its bind address (taken by another process, or a
 * port below 1024 without the privilege). `server` says which (`health`: `/healthz` and
 * `/readyz`; `metrics`: `/metrics`), `address` is the bind address as given, `reason` is
 * `AddrInUse`, `PermissionDenied` or the error's name; the cause is kept in `cause`.
 * Thrown by `Manager.run` before anything reconciles.
 */
export class ListenError extends Error {
  /** Always `ListenError`. */
  override name = "ListenError";
  /** The server that could not listen. */
  readonly server: ServerName;
  /** Its bind address, as given (`host:port` or `:port`). */
  readonly address: string;
  /** `AddrInUse`, `PermissionDenied` or the name of another error. */
  readonly reason: string;

  /** Wraps `cause`, the error of the listen call. */
  constructor(server: ServerName, address: string, cause: unknown) {
    const reason = cause instanceof Deno.errors.AddrInUse
      ? "AddrInUse"
      : cause instanceof Deno.errors.PermissionDenied
      ? "PermissionDenied"
      : cause instanceof Error
      ? cause.name
      : "Error";
    const what = reason === "AddrInUse"
      ? "address already in use"
      : reason === "PermissionDenied"
      ? "permission denied"
      : cause instanceof Error
      ? cause.message
      : String(cause);
    super(
      `cannot listen on ${address} for ${
        server === "health" ? "/healthz and /readyz" : "/metrics"
      }: ${what}`,
      { cause },
    );
    this.server = server;
    this.address = address;
    this.reason = reason;
  }
}

/** A named check; returns undefined when healthy, or the reason it is not. */
export type Check = () => string | undefined;

/**
 * How long (ms) a synced informer may fail to list or watch, without a single success, before
 * `/readyz` reports it: 30 s. It is the reflector's capped backoff (client-go's 30 s): by then
 * the retries are at their slowest and the cache is known to be going stale (a deleted CRD,
 * revoked RBAC, an apiserver gone for good). It is also the tolerance kubelet gives a failing
 * probe by default (failureThreshold 3 × periodSeconds 10 s). Shorter outages — an apiserver
 * restart or upgrade, a dropped connection — keep the replica ready while the cache catches up.
 */
export const INFORMER_FAILING_NOT_READY_MS = 30_000;

/** What {@link informerCheck} reads of an informer's reflector. */
export interface InformerStatus {
  /** The first list (or WatchList initial events) has been applied. */
  readonly hasSynced: boolean;
  /** The last list or watch failure, while retrying. */
  readonly lastError?: string;
  /** Clock time (ms) of the first failed attempt since the last success; undefined if healthy. */
  readonly failingSinceMs?: number;
  /** Failed attempts since the last success. */
  readonly failedAttempts: number;
  /** The reflector's state, named in the message while not synced. */
  readonly state: { phase: string };
  /** Set while its watch is known not to hear the apiserver (clock ms and why). */
  readonly deaf?: { sinceMs: number; reason: string };
}

/**
 * The readiness check of one informer: not ready until it has synced; once synced, not ready
 * while its watch is known to be deaf (it missed the apiserver's bookmark cadence, or its
 * connection was found dead: see the reflector), naming since when and why, until a watch is
 * accepted again; and not ready while it has been failing to list or watch for `failingForMs` or
 * longer (default {@link INFORMER_FAILING_NOT_READY_MS}), naming how long, how many attempts and
 * the last error; ready again at the first success. `now` is the same clock the reflector runs
 * on.
 */
export function informerCheck(
  r: InformerStatus,
  now: () => number,
  failingForMs: number = INFORMER_FAILING_NOT_READY_MS,
): Check {
  return () => {
    if (!r.hasSynced) return `not synced (${r.lastError ?? r.state.phase})`;
    const deaf = r.deaf;
    if (deaf) {
      const s = Math.round((now() - deaf.sinceMs) / 1000);
      const retry = r.lastError ? `; reconnecting: ${r.lastError}` : "";
      return `watch deaf for ${s} s (${deaf.reason})${retry}`;
    }
    const since = r.failingSinceMs;
    if (since === undefined) return undefined;
    const failingMs = now() - since;
    if (failingMs < failingForMs) return undefined;
    return `list/watch failing for ${Math.round(failingMs / 1000)} s (${r.failedAttempts} ` +
      `attempts): ${r.lastError ?? "unknown error"}`;
  };
}

/** What {@link connectionCheck} reads of the client's ConnectionHealth. */
export interface ConnectionStatus {
  /** When the current run of requests without an answer began (ms); undefined while healthy. */
  readonly failingSinceMs?: number;
  /** Requests without an answer in that run. */
  readonly failures: number;
  /** The last one's reason (e.g. `invalid peer certificate: UnknownIssuer`). */
  readonly lastError?: string;
}

/**
 * The readiness check of the path to the apiserver: not ready while every request for
 * `failingForMs` or longer (default {@link INFORMER_FAILING_NOT_READY_MS}, for the same reasons)
 * got no answer, naming how long, how many and the last reason — a TLS failure after a CA
 * rotation, a refused connection, timeouts; `hint` is appended (e.g. where the trusted CA comes
 * from). Ready again at the first answer.
 */
export function connectionCheck(
  c: ConnectionStatus,
  now: () => number,
  hint: () => string | undefined = () => undefined,
  failingForMs: number = INFORMER_FAILING_NOT_READY_MS,
): Check {
  return () => {
    const since = c.failingSinceMs;
    if (since === undefined) return undefined;
    const failingMs = now() - since;
    if (failingMs < failingForMs) return undefined;
    const h = hint();
    return `no answer from the apiserver for ${Math.round(failingMs / 1000)} s (${c.failures} ` +
      `requests): ${c.lastError ?? "unknown error"}${h ? `; ${h}` : ""}`;
  };
}

/** Serves a set of routes until `signal` aborts. Returns the bound port. */
export function serveRoutes(
  addr: BindAddress,
  routes: Record<string, () => Response | Promise<Response>>,
  signal: AbortSignal,
): { port: number; finished: Promise<void> } {
  const server = Deno.serve({
    hostname: addr.hostname,
    port: addr.port,
    signal,
    onListen: () => {},
  }, async (req) => {
    const path = new URL(req.url).pathname;
    const route = routes[path];
    if (!route) return new Response("not found\n", { status: 404 });
    return await route();
  });
  return { port: server.addr.port, finished: server.finished };
}

/** A `/healthz` or `/readyz` handler over named checks (200 "ok", or 500 listing failures). */
export function checksHandler(checks: Record<string, Check>): () => Response {
  return () => {
    const failed: string[] = [];
    for (const [name, check] of Object.entries(checks)) {
      const why = check();
      if (why !== undefined) failed.push(`[-]${name} failed: ${why}`);
    }
    if (failed.length === 0) return new Response("ok\n", { status: 200 });
    return new Response(failed.join("\n") + "\n", { status: 500 });
  };
}
