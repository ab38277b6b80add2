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
  hostname: string;
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

/** A named check; returns undefined when healthy, or the reason it is not. */
export type Check = () => string | undefined;

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
