/**
 * The `/metrics` endpoint: plain HTTP, or HTTPS with every request authenticated (TokenReview)
 * and authorized (SubjectAccessReview) through a {@link DelegatedAuth} — controller-runtime's
 * metrics server with `SecureServing: true` and `FilterProvider:
 * filters.WithAuthenticationAndAuthorization`, as kubebuilder v4 scaffolds it.
 *
 * The HTTPS server is node:https (Deno's Node compatibility layer), not `Deno.serve`, for two
 * reasons (docs/design/runtime.md, "Secure metrics server"): `Deno.serve` over TLS answers
 * HTTP/1.1 requests with a body over ~1 KB about 40 ms late (Nagle's algorithm meeting the
 * client's delayed ACK; TCP_NODELAY cannot be set on its TLS connections); and node's
 * `setSecureContext` swaps the certificate for new
 * connections under the running listener, where `Deno.serve` would have to close and reopen the
 * port. It speaks HTTP/1.1 only, which is also kubebuilder's default for the metrics server
 * (`--enable-http2=false`, for the 2023 HTTP/2 Rapid Reset CVEs). Plain HTTP stays on
 * `Deno.serve`.
 *
 * The serving certificate (secure mode):
 * - with `certDir`: `tls.crt` and `tls.key` in it (the keys of a `kubernetes.io/tls` Secret, the
 *   names controller-runtime's CertName/KeyName default to). They are read again every
 *   {@link CERT_RELOAD_INTERVAL_MS}; a changed pair is checked first (it must load as a TLS
 *   server identity) and then used for every new connection, without a restart and without
 *   closing the port (connections already open keep the pair they were made with). A pair that
 *   does not load is logged once and the old one is kept.
 * - without: a self-signed certificate made in memory at start ({@link selfSignedCertificate}:
 *   `localhost`, 127.0.0.1, ::1, valid one year) and made anew when less than
 *   {@link SELF_SIGNED_RENEW_BEFORE_MS} of it is left. Scrapers then skip verification
 *   (Prometheus `insecure_skip_verify`), as with controller-runtime's self-signed default; the
 *   connection is still encrypted.
 *
 * Answers: `/metrics` 200 with the exposition text, or 401/403/500/503 with the bare status text
 * (no detail; the reason of a 500/503 is logged, and of a 401/403 at debug level); any other
 * path 404 without authentication (as controller-runtime's mux).
 *
 * @module
 */
import { createServer } from "node:https";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { BindAddress } from "./health.ts";
import type { AuthDecision, DelegatedAuth } from "./delegated_auth.ts";
import { type Clock, realClock } from "./clock.ts";
import { errorText, type Logger } from "./log.ts";
import { type CertificatePem, selfSignedCertificate } from "./x509.ts";

/**
 * How often `tls.crt`/`tls.key` are read again (ms): 10 s, controller-runtime certwatcher's
 * polling interval (`defaultWatchInterval`). A kubelet-updated Secret volume thus takes effect
 * within its own sync delay plus 10 s, well inside a minute.
 */
export const CERT_RELOAD_INTERVAL_MS = 10_000;
/** A self-signed certificate is made anew when less than this is left of it (ms): 30 days. */
export const SELF_SIGNED_RENEW_BEFORE_MS = 30 * 24 * 3_600_000;

/** File names in `certDir` (kubernetes.io/tls Secret keys; controller-runtime's defaults). */
export const CERT_FILE = "tls.crt";
/** See {@link CERT_FILE}. */
export const KEY_FILE = "tls.key";

/** Options of {@link startMetricsServer}. */
export interface MetricsServerOptions {
  /** Where to listen. */
  address: BindAddress;
  /** Produces the `/metrics` answer: exposition text and its content type. */
  metrics: () => Promise<{ text: string; contentType: string }>;
  /** HTTPS with delegated authn/authz; plain HTTP when absent. */
  secure?: {
    /** Checks each request. */
    auth: DelegatedAuth;
    /** Folder with tls.crt and tls.key; self-signed when absent or "". */
    certDir?: string;
    /** Default {@link CERT_RELOAD_INTERVAL_MS}. */
    reloadIntervalMs?: number;
    /**
     * Told of each read of `certDir`'s pair, at start and at every reload check: `ok` false when
     * a file could not be read or the pair does not load (controller-runtime's certwatcher
     * counts these reads and their errors).
     */
    onCertificateRead?: (ok: boolean) => void;
  };
  /** Stops the server (gracefully) when aborted. */
  signal: AbortSignal;
  /** Logger of the server (certificate reloads, review failures). */
  log: Logger;
  /** Time source of reload checks; default real. */
  clock?: Clock;
}

/** A running metrics server. */
export interface MetricsServer {
  /** The bound port (the real one when the address asked for 0). */
  readonly port: number;
  /** `https` or `http`. */
  readonly scheme: "https" | "http";
  /** The certificate served now (secure mode). */
  readonly certificate?: { certPem: string; source: string };
  /** Resolves once the server has stopped after the signal. */
  readonly finished: Promise<void>;
}

/** Reads `tls.crt` and `tls.key` from `dir`. @throws Error naming the file that cannot be read */
export async function readCertDir(dir: string): Promise<{ certPem: string; keyPem: string }> {
  const read = async (f: string) => {
    try {
      return await Deno.readTextFile(`${dir}/${f}`);
    } catch (err) {
      throw new Error(`cannot read ${dir}/${f}: ${(err as Error).message}`);
    }
  };
  return { certPem: await read(CERT_FILE), keyPem: await read(KEY_FILE) };
}

/**
 * Throws unless `certPem`/`keyPem` load as a TLS server identity (a certificate chain and the
 * matching private key), checked by opening and closing a TLS listener on 127.0.0.1:0 — the same
 * loader `Deno.serve` uses.
 */
export function checkKeyPair(pair: { certPem: string; keyPem: string }, source: string): void {
  try {
    Deno.listenTls({ hostname: "127.0.0.1", port: 0, cert: pair.certPem, key: pair.keyPem })
      .close();
  } catch (err) {
    throw new Error(`${source}: not a usable certificate and key: ${errorText(err)}`);
  }
}

/** Reason phrases of the statuses answered without detail. */
const STATUS_TEXT: Record<number, string> = {
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  500: "Internal Server Error",
  503: "Service Unavailable",
};

/** Logs a decision that is not 200 (401/403 at debug, review failures as errors). */
function logDecision(log: Logger, d: AuthDecision, path: string): void {
  switch (d.status) {
    case 200:
      return;
    case 401:
      log.debug("Unauthenticated metrics request", { path, reason: d.reason, error: d.error });
      return;
    case 403:
      log.debug("Forbidden metrics request", { path, user: d.user.username, reason: d.reason });
      return;
    case 500:
    case 503:
      log.error("Cannot check a metrics request", {
        path,
        review: d.stage,
        status: d.status,
        error: errorText(d.error),
      });
      return;
    default: {
      const never: never = d;
      log.error("Unknown decision", { decision: never });
    }
  }
}

/** An answer of the handler, independent of the HTTP server that sends it. */
interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** The plain-text answer of a status, without detail. */
function bare(status: number, headers: Record<string, string> = {}): Answer {
  return {
    status,
    headers: { "Content-Type": "text/plain; charset=utf-8", ...headers },
    body: `${STATUS_TEXT[status] ?? status}\n`,
  };
}

/**
 * Starts `/metrics` on `o.address`. Resolves once listening.
 * @throws AddrInUse when the address is taken; Error when `certDir`'s files cannot be read or do
 *   not load
 */
export async function startMetricsServer(o: MetricsServerOptions): Promise<MetricsServer> {
  const { log } = o;
  const answer = async (
    method: string,
    url: string,
    authorization: string | null,
  ): Promise<Answer> => {
    const path = new URL(url, "http://localhost").pathname;
    if (path !== "/metrics") return bare(404);
    if (o.secure) {
      // controller-runtime's filter: verb = lowercase method, path = URL path.
      const d = await o.secure.auth.check(authorization, { path, verb: method.toLowerCase() });
      logDecision(log, d, path);
      if (d.status === 401) return bare(401, { "WWW-Authenticate": 'Bearer realm="metrics"' });
      if (d.status !== 200) return bare(d.status);
    }
    const m = await o.metrics();
    return { status: 200, headers: { "Content-Type": m.contentType }, body: m.text };
  };

  if (!o.secure) {
    const server = Deno.serve({
      hostname: o.address.hostname,
      port: o.address.port,
      signal: o.signal,
      onListen: () => {},
    }, async (req) => {
      const a = await answer(req.method, req.url, req.headers.get("Authorization"));
      return new Response(a.body, { status: a.status, headers: a.headers });
    });
    return { port: server.addr.port, scheme: "http", finished: server.finished };
  }

  const clock = o.clock ?? realClock;
  const certDir = o.secure.certDir || undefined;
  const source = certDir ? `--metrics-cert-dir ${certDir}` : "self-signed";
  let current: CertificatePem | { certPem: string; keyPem: string; notAfterMs?: undefined };
  const told = (ok: boolean) => {
    try {
      o.secure?.onCertificateRead?.(ok);
    } catch { /* metrics must not break the server */ }
  };
  if (certDir) {
    try {
      current = await readCertDir(certDir);
      checkKeyPair(current, certDir);
    } catch (err) {
      told(false);
      throw err;
    }
    told(true);
  } else {
    current = await selfSignedCertificate();
  }
  const server = createServer(
    { cert: current.certPem, key: current.keyPem, minVersion: "TLSv1.2" },
    (req: IncomingMessage, res: ServerResponse) => {
      answer(req.method ?? "GET", req.url ?? "/", req.headers.authorization ?? null)
        .catch((err) => {
          log.error("Metrics request failed", { error: errorText(err) });
          return bare(500);
        })
        .then((a) => {
          const body = new TextEncoder().encode(a.body);
          res.writeHead(a.status, { ...a.headers, "Content-Length": String(body.length) });
          res.end(body);
        });
    },
  );
  // Handshakes that fail (port scanners, clients not trusting the certificate) are the client's
  // business; without a listener they would be reported as unhandled.
  server.on("tlsClientError", () => {});
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: Error & { code?: string }) => {
      const where = `${o.address.hostname}:${o.address.port}`;
      reject(
        err.code === "EADDRINUSE"
          ? new Deno.errors.AddrInUse(`${where} is in use`)
          : err.code === "EACCES"
          ? new Deno.errors.PermissionDenied(`${where}: permission denied`)
          : err,
      );
    });
    server.listen(o.address.port, o.address.hostname, () => resolve());
  });
  const port = (server.address() as { port: number }).port;
  const state = { certPem: current.certPem, source };
  const reloadMs = o.secure.reloadIntervalMs ?? CERT_RELOAD_INTERVAL_MS;
  let lastReadError = "";
  let lastBadPair = "";
  let stopped = false;
  let timer: unknown;
  let ticking: Promise<void> = Promise.resolve();

  /** Serves `pair` to every new connection from now on (node's setSecureContext). */
  const use = (pair: { certPem: string; keyPem: string }) => {
    server.setSecureContext({ cert: pair.certPem, key: pair.keyPem, minVersion: "TLSv1.2" });
    state.certPem = pair.certPem;
  };

  /** One reload check: a changed cert-dir pair, or a self-signed certificate near its end. */
  const check = async () => {
    if (certDir) {
      let pair;
      try {
        pair = await readCertDir(certDir);
      } catch (err) {
        told(false);
        const why = errorText(err);
        if (why !== lastReadError) log.warn("Metrics certificate not reloaded", { error: why });
        lastReadError = why;
        return;
      }
      lastReadError = "";
      if (pair.certPem === current.certPem && pair.keyPem === current.keyPem) return told(true);
      if (pair.certPem + pair.keyPem === lastBadPair) return told(false); // logged once
      try {
        checkKeyPair(pair, certDir);
      } catch (err) {
        told(false);
        log.warn("Metrics certificate not reloaded; serving the previous one", {
          error: errorText(err),
        });
        lastBadPair = pair.certPem + pair.keyPem;
        return;
      }
      told(true);
      use(pair);
      current = pair;
      log.info("Reloaded the metrics serving certificate", { certDir, port });
    } else if (current.notAfterMs !== undefined) {
      if (clock.now() < current.notAfterMs - SELF_SIGNED_RENEW_BEFORE_MS) return;
      const fresh = await selfSignedCertificate();
      use(fresh);
      current = fresh;
      log.info("Renewed the self-signed metrics certificate", {
        notAfter: new Date(fresh.notAfterMs).toISOString(),
      });
    }
  };
  const schedule = () => {
    timer = clock.setTimer(() => {
      ticking = check()
        .catch((err) => log.error("Metrics certificate reload failed", { error: errorText(err) }))
        .finally(() => {
          if (!stopped) schedule();
        });
    }, reloadMs);
  };
  schedule();
  const finished = new Promise<void>((resolve) => {
    const stop = async () => {
      stopped = true;
      clock.clearTimer(timer);
      await ticking;
      // Stop accepting, let requests in flight finish, drop idle keep-alive connections.
      const closed = new Promise<void>((r) => server.close(() => r()));
      server.closeIdleConnections?.();
      await closed;
      resolve();
    };
    if (o.signal.aborted) void stop();
    else o.signal.addEventListener("abort", () => void stop(), { once: true });
  });
  return {
    port,
    scheme: "https",
    get certificate() {
      return { certPem: state.certPem, source: state.source };
    },
    finished,
  };
}
