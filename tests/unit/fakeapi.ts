/**
 * A tiny HTTP server on 127.0.0.1 for client unit tests: it records every request (method, path,
 * arrival time on `performance.now()`) and answers from a handler the test sets; by default a
 * Lease store (GET/POST/PUT of coordination.k8s.io Leases with resourceVersion checks) and `{}`
 * for everything else. Not an apiserver: only what the client's own logic needs.
 *
 * @module
 */
import type { ClusterConfig } from "../../lib/kube/config.ts";

/** One request the server received. */
export interface Received {
  method: string;
  path: string;
  /** `performance.now()` when the handler started. */
  atMs: number;
}

/** Answers one request; undefined falls through to the default behaviour. */
export type Handler = (req: Request, path: string) => Response | undefined;

/** See the module doc. */
export class FakeServer {
  readonly received: Received[] = [];
  /** Consulted first for every request. */
  handler?: Handler;
  /** When set, Lease writes (POST/PUT) answer 500: the Lease cannot be renewed. */
  failLeaseWrites = false;
  #server: Deno.HttpServer<Deno.NetAddr>;
  #leases = new Map<string, Record<string, unknown>>();
  #rv = 0;

  constructor() {
    this.#server = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen: () => {} },
      (req) => this.#handle(req),
    );
  }

  /** A ClusterConfig for a KubeClient talking to this server (token auth over plain HTTP). */
  config(): ClusterConfig {
    return {
      server: `http://127.0.0.1:${this.#server.addr.port}`,
      auth: { kind: "token", token: "test" },
      namespace: "default",
      source: "test server",
    };
  }

  /** Requests received whose method and path match. */
  count(method: string, pathIncludes: string): number {
    return this.received.filter((r) => r.method === method && r.path.includes(pathIncludes))
      .length;
  }

  async #handle(req: Request): Promise<Response> {
    const path = new URL(req.url).pathname;
    this.received.push({ method: req.method, path, atMs: performance.now() });
    const body = req.body ? await req.text() : "";
    const own = this.handler?.(req, path);
    if (own) return own;
    if (path.includes("/leases")) return this.#lease(req.method, path, body);
    return Response.json({});
  }

  #lease(method: string, path: string, body: string): Response {
    const status = (code: number, reason: string) =>
      Response.json({ kind: "Status", code, reason, message: reason }, { status: code });
    if (method === "GET") {
      const l = this.#leases.get(path);
      return l ? Response.json(l) : status(404, "NotFound");
    }
    if (this.failLeaseWrites) return status(500, "InternalError");
    const obj = JSON.parse(body);
    const name = obj.metadata.name;
    const key = method === "POST" ? `${path}/${name}` : path;
    const cur = this.#leases.get(key);
    if (method === "POST" && cur) return status(409, "AlreadyExists");
    if (
      method === "PUT" && cur?.metadata &&
      (cur.metadata as { resourceVersion?: string }).resourceVersion !==
        obj.metadata.resourceVersion
    ) {
      return status(409, "Conflict");
    }
    obj.metadata.resourceVersion = String(++this.#rv);
    this.#leases.set(key, obj);
    return Response.json(obj, { status: method === "POST" ? 201 : 200 });
  }

  /** Stops the server. */
  async close(): Promise<void> {
    await this.#server.shutdown();
  }
}
