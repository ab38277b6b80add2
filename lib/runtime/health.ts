/**
 * The HTTP endpoints of the process: `/healthz` and `/readyz` (with `?verbose`, `?exclude=` and
 * per-check paths such as `/readyz/<check>`, as controller-runtime serves them) on the
 * health-probe address, `/metrics` on the metrics address (controller-runtime's `--health-probe-bind-address` and
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

/**
 * A route's handler: `url` is the request's, `subpath` what follows the route's path (`""` for
 * the route itself, `/apiserver` for `/readyz/apiserver`).
 */
export type RouteHandler = (url: URL, subpath: string) => Response | Promise<Response>;

/**
 * Serves a set of routes until `signal` aborts. A route `/readyz` answers `/readyz` and every
 * path below it (`/readyz/<check>`); any other path is 404. Returns the bound port.
 */
export function serveRoutes(
  addr: BindAddress,
  routes: Record<string, RouteHandler>,
  signal: AbortSignal,
): { port: number; finished: Promise<void> } {
  const server = Deno.serve({
    hostname: addr.hostname,
    port: addr.port,
    signal,
    onListen: () => {},
  }, async (req) => {
    const url = new URL(req.url);
    const path = url.pathname;
    for (const [route, handler] of Object.entries(routes)) {
      if (path === route) return await handler(url, "");
      if (path.startsWith(route + "/")) return await handler(url, path.slice(route.length));
    }
    return new Response("not found\n", { status: 404 });
  });
  return { port: server.addr.port, finished: server.finished };
}

/** A plain-text answer of the health endpoints (controller-runtime's headers). */
function text(body: string, status: number): Response {
  return new Response(body, {
    status,
    headers: { "Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff" },
  });
}

/**
 * The `/healthz` or `/readyz` handler over named checks, answering as controller-runtime's
 * healthz handler does (pkg/healthz):
 * - the route itself runs every check: all pass → 200 `ok`; else 500 with one line per check,
 *   sorted by name, `[+]<name> ok` or `[-]<name> failed: <reason>`, then `healthz check failed`.
 *   With `?verbose` (any value) the lines are given when all pass too, then
 *   `healthz check passed`. `?exclude=<name>` (repeatable) skips a check, listed as
 *   `[+]<name> excluded: ok`; a name that matches no check adds the line
 *   `warn: some health checks cannot be excluded: no matches for "<name>"`.
 * - `<route>/<name>` runs that check alone: 200 `ok`, or 500
 *   `internal server error: <reason>`; 404 for a name that is no check.
 *
 * Unlike controller-runtime, a failed check's reason is given (controller-runtime writes
 * `reason withheld` in the list): the probe port is not the metrics port, and the reason is what
 * an operator of the operator needs (docs/operations.md). Every body ends with a newline.
 */
export function checksHandler(checks: Record<string, Check>): RouteHandler {
  return (url, subpath) => {
    if (subpath !== "" && subpath !== "/") {
      const name = subpath.slice(1);
      const check = Object.hasOwn(checks, name) ? checks[name] : undefined;
      if (!check) return text("not found\n", 404);
      const why = check();
      return why === undefined ? text("ok\n", 200) : text(`internal server error: ${why}\n`, 500);
    }
    const excluded = new Set(url.searchParams.getAll("exclude"));
    const unknown = [...excluded].filter((name) => !Object.hasOwn(checks, name));
    const lines: string[] = [];
    let failed = false;
    for (const name of Object.keys(checks).sort()) {
      if (excluded.has(name)) {
        lines.push(`[+]${name} excluded: ok`);
        continue;
      }
      const why = checks[name]();
      if (why !== undefined) failed = true;
      lines.push(why === undefined ? `[+]${name} ok` : `[-]${name} failed: ${why}`);
    }
    if (!failed && !url.searchParams.has("verbose")) return text("ok\n", 200);
    if (unknown.length > 0) {
      lines.push(
        "warn: some health checks cannot be excluded: no matches for " +
          unknown.map((n) => JSON.stringify(n)).join(","),
      );
    }
    lines.push(failed ? "healthz check failed" : "healthz check passed");
    return text(lines.join("\n") + "\n", failed ? 500 : 200);
  };
}
