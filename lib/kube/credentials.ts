/**
 * Turns an {@link AuthConfig} into what each request presents: an `Authorization` header and/or
 * the TLS client certificate of a `Deno.HttpClient`, which also carries the CAs trusted for the
 * apiserver.
 *
 * Rules (client-go `transport` and `plugin/pkg/client/auth/exec`, extended to every file):
 * - Credential files are read again when they change: the CA bundle (`certificate-authority`, the
 *   in-cluster `ca.crt`), the client certificate and key files, and the token file. They are
 *   checked at least every {@link CREDENTIAL_FILE_CHECK_MS} (at the next request, or by the
 *   client's timer while watches are open), at once after a request got no answer (a TLS failure
 *   after the apiserver's CA rotated is one; at most once per
 *   {@link CREDENTIAL_RECHECK_MIN_INTERVAL_MS}) and after a 401. client-go re-reads bound service
 *   account tokens every minute but reads a CA file once; a CA rotation then needs a restart.
 * - When the CA or the client certificate/key changes, a new `Deno.HttpClient` is built and used
 *   by every later request; the old one is closed once no request is being sent through it (a
 *   response already streaming, such as a watch, is not affected by the close), and
 *   {@link CredentialProvider.onTlsChange} listeners are told (the client reconnects its watches
 *   with the new material). A file that is missing, empty or not PEM, or material Deno refuses,
 *   is not adopted: the last good material stays in use and the file is read again later (a
 *   rotation tool may be half-way).
 * - A token read from a file is used for at most {@link TOKEN_FILE_REREAD_MS}.
 * - An exec plugin's ExecCredential is cached until its `expirationTimestamp` (or forever without
 *   one) and the plugin is run again after a 401.
 * - A credential that cannot be produced throws {@link ConfigError}; no request goes out without it.
 * - Connections are HTTP/1.1 (as kube-rs's client), not HTTP/2 (why: docs/design/client.md,
 *   "HTTP/1.1"). Each request in flight has a connection of its own; idle ones are pooled and
 *   reused.
 *
 * @module
 */
import {
  type AuthConfig,
  checkCaPem,
  checkClientPair,
  type ClusterConfig,
  type ExecConfig,
} from "./config.ts";
import { ConfigError } from "./errors.ts";
import { runExecPlugin } from "./exec.ts";
import { warmUpTls } from "./tls_warmup.ts";

/** How long a token read from a file is used before the file is read again (ms); client-go, 1 min. */
export const TOKEN_FILE_REREAD_MS = 60_000;
/**
 * Credential files are checked for changes at least this often (ms): a minute, as client-go
 * re-reads bound service account tokens; the kubelet rewrites projected files (token, `ca.crt`)
 * well ahead of their expiry, so a minute is ample, and a rotation that breaks requests before
 * it is noticed is caught at once by the re-check after a failure.
 */
export const CREDENTIAL_FILE_CHECK_MS = 60_000;
/** Re-checks of the credential files triggered by failed requests are at least this far apart (ms). */
export const CREDENTIAL_RECHECK_MIN_INTERVAL_MS = 1_000;
export { EXEC_TIMEOUT_MS } from "./exec.ts";

/** What one request presents. */
export interface Credential {
  /** Value for the Authorization header, e.g. `Bearer abc`, if any. */
  authorization?: string;
  /** The HTTP client carrying the trusted CA and, for certificate auth, the client certificate. */
  httpClient: Deno.HttpClient;
  /**
   * Call once the request has been sent and answered (or failed): the HTTP client may be closed
   * after a rotation only when no request is being sent through it. Idempotent.
   */
  release(): void;
}

/** What changed in the TLS material ({@link CredentialProvider.onTlsChange}). */
export interface TlsChange {
  /** Which files: `certificate-authority`, `client-certificate`, `client-key`, or `exec`. */
  changed: string[];
}

interface ClientPair {
  certPem: string;
  keyPem: string;
}

/** One `Deno.HttpClient` and the requests being sent through it. */
interface Transport {
  client: Deno.HttpClient;
  /** caPem + cert + key, to tell whether the material changed. */
  key: string;
  users: number;
  retired: boolean;
  closed: boolean;
}

/** Produces the current credential, re-reads credential files, and drops it on a 401. */
export class CredentialProvider {
  #config: ClusterConfig;
  #proxy?: Deno.Proxy;
  #execEnv: Record<string, string>;
  #now: () => number;
  /** Trusted CAs now (from the config, then from re-reads of `caFile`). */
  #caPem?: string;
  /** The client certificate from the kubeconfig (and re-reads of its files). */
  #filePair?: ClientPair;
  /** The client certificate an exec plugin gave. */
  #execPair?: ClientPair;
  /** The Authorization part; undefined until fetched or after invalidate(). */
  #auth?: { authorization?: string; expiresAtMs: number };
  #transport?: Transport;
  #retired = new Set<Transport>();
  #pending?: Promise<void>;
  #checking?: Promise<void>;
  #lastCheckMs: number;
  #checkDue = false;
  #lastFailureRecheckMs = -Infinity;
  #lastFileError?: string;
  #tlsListeners = new Set<(c: TlsChange) => void>();
  #closed = false;

  /**
   * A provider of `config`'s credential; nothing is read or run until it is first asked for.
   * @param config the resolved connection
   * @param now clock in ms (injected for tests)
   * @param transport the proxy of every HTTP client built (proxy.ts; none: direct) and the
   *   environment variables exec plugins get on top of the inherited environment
   */
  constructor(
    config: ClusterConfig,
    now: () => number = Date.now,
    transport: { proxy?: Deno.Proxy; execEnv?: Record<string, string> } = {},
  ) {
    this.#config = config;
    this.#proxy = transport.proxy;
    this.#execEnv = transport.execEnv ?? {};
    this.#now = now;
    this.#caPem = config.caPem;
    if (config.auth.kind === "clientCertificate") {
      this.#filePair = { certPem: config.auth.certPem, keyPem: config.auth.keyPem };
    }
    this.#lastCheckMs = now();
  }

  /** Whether any credential comes from a file that may change. */
  get hasFiles(): boolean {
    const a = this.#config.auth;
    return !!this.#config.caFile || a.kind === "tokenFile" ||
      (a.kind === "clientCertificate" && !!(a.certFile || a.keyFile));
  }

  /** Clock time (ms) of the last check of the credential files. */
  get lastCheckMs(): number {
    return this.#lastCheckMs;
  }

  /** Why the last re-read of a credential file was not adopted, if it was not. */
  get lastFileError(): string | undefined {
    return this.#lastFileError;
  }

  /** Calls `fn` when the CA or client certificate changes; returns the unsubscribe function. */
  onTlsChange(fn: (c: TlsChange) => void): () => void {
    this.#tlsListeners.add(fn);
    return () => this.#tlsListeners.delete(fn);
  }

  #pairKey(p?: ClientPair): string {
    return p ? `${p.certPem}\u0000${p.keyPem}` : "";
  }

  #currentPair(): ClientPair | undefined {
    return this.#config.auth.kind === "clientCertificate" ? this.#filePair : this.#execPair;
  }

  #materialKey(caPem = this.#caPem, pair = this.#currentPair()): string {
    return `${caPem ?? ""}\u0000${this.#pairKey(pair)}`;
  }

  /** Builds an HTTP client for the given material. @throws ConfigError when Deno refuses it. */
  #makeClient(caPem: string | undefined, pair: ClientPair | undefined): Deno.HttpClient {
    // The first handshake's crypto set-up, off the JavaScript thread (a no-op once started).
    warmUpTls();
    // HTTP/1.1 only: see the module doc.
    const opts: Deno.CreateHttpClientOptions = { http1: true, http2: false };
    if (caPem) opts.caCerts = [caPem];
    // The proxy chosen for this apiserver (proxy.ts), or none: a direct connection.
    if (this.#proxy) opts.proxy = this.#proxy;
    if (pair) {
      (opts as Record<string, unknown>).cert = pair.certPem;
      (opts as Record<string, unknown>).key = pair.keyPem;
    }
    try {
      return Deno.createHttpClient(opts);
    } catch (err) {
      throw new ConfigError(
        `cannot use the TLS material of ${this.#config.source}: ${(err as Error).message}`,
      );
    }
  }

  /** Replaces the transport by `client` built for `key`; the old one closes once unused. */
  #install(client: Deno.HttpClient, key: string): void {
    const old = this.#transport;
    this.#transport = { client, key, users: 0, retired: false, closed: false };
    if (old) this.#retire(old);
  }

  #retire(t: Transport): void {
    t.retired = true;
    if (t.users === 0) this.#closeTransport(t);
    else this.#retired.add(t);
  }

  #closeTransport(t: Transport): void {
    this.#retired.delete(t);
    if (t.closed) return;
    t.closed = true;
    try {
      t.client.close();
    } catch { /* already closed */ }
  }

  /** The transport for the current material, built when missing or stale. */
  #currentTransport(): Transport {
    const key = this.#materialKey();
    if (!this.#transport || this.#transport.key !== key) {
      this.#install(this.#makeClient(this.#caPem, this.#currentPair()), key);
    }
    return this.#transport!;
  }

  /**
   * The credential for the next request; checks the credential files when due, runs the exec
   * plugin or reads the token file if due. Rejects with the signal's reason when `signal` aborts
   * first (the refresh itself goes on for other callers, bounded by {@link EXEC_TIMEOUT_MS}), so
   * a hung plugin cannot hold up a Lease renewal past its deadline. Call `release()` on the
   * result once the request is answered.
   */
  get(signal?: AbortSignal): Promise<Credential> {
    if (this.#closed) return Promise.reject(new Deno.errors.BadResource("credentials closed"));
    const now = this.#now();
    const a = this.#auth;
    const filesDue = this.hasFiles &&
      (this.#checkDue || now - this.#lastCheckMs >= CREDENTIAL_FILE_CHECK_MS);
    if (a && now < a.expiresAtMs && !filesDue) {
      try {
        return Promise.resolve(this.#lease(a.authorization));
      } catch (err) {
        return Promise.reject(err);
      }
    }
    // One refresh at a time; concurrent callers share it.
    this.#pending ??= (async () => {
      if (filesDue) await this.checkFiles();
      const b = this.#auth;
      if (!b || this.#now() >= b.expiresAtMs) await this.#refresh();
    })().finally(() => this.#pending = undefined);
    const ready = this.#pending.then(() => this.#lease(this.#auth?.authorization));
    if (!signal) return ready;
    if (signal.aborted) return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        reject(signal.reason);
        ready.then((c) => c.release(), () => {});
      };
      signal.addEventListener("abort", onAbort, { once: true });
      ready.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
    });
  }

  #lease(authorization: string | undefined): Credential {
    const t = this.#currentTransport();
    t.users++;
    let released = false;
    return {
      authorization,
      httpClient: t.client,
      release: () => {
        if (released) return;
        released = true;
        t.users--;
        if (t.retired && t.users === 0) this.#closeTransport(t);
      },
    };
  }

  /**
   * Forgets the cached credential (after a 401), so the next {@link get} fetches a fresh one and
   * checks the credential files first.
   */
  invalidate(): void {
    this.#auth = undefined;
    this.#checkDue = true;
  }

  /**
   * A request got no answer (a TLS failure among others): check the credential files before the
   * next request, at most once per {@link CREDENTIAL_RECHECK_MIN_INTERVAL_MS}.
   */
  recheckAfterFailure(): void {
    const now = this.#now();
    if (now - this.#lastFailureRecheckMs < CREDENTIAL_RECHECK_MIN_INTERVAL_MS) return;
    this.#lastFailureRecheckMs = now;
    if (this.hasFiles) this.#checkDue = true;
  }

  /**
   * Reads the credential files again now and adopts what changed (see the module doc). Resolves
   * true when the TLS material changed. Never throws: a file that cannot be used is reported in
   * {@link lastFileError} and the last good material stays.
   */
  checkFiles(): Promise<boolean> {
    let changed = false;
    this.#checking ??= (async () => {
      changed = await this.#checkFiles();
    })().finally(() => this.#checking = undefined);
    return this.#checking.then(() => changed);
  }

  async #checkFiles(): Promise<boolean> {
    this.#lastCheckMs = this.#now();
    this.#checkDue = false;
    const c = this.#config;
    const a = c.auth;
    const errors: string[] = [];
    const read = async (path: string, what: string): Promise<string | undefined> => {
      try {
        return await Deno.readTextFile(path);
      } catch (err) {
        errors.push(`cannot read ${what} ${path}: ${(err as Error).message}`);
        return undefined;
      }
    };
    let caPem = this.#caPem;
    let pair = this.#filePair;
    const changed: string[] = [];
    if (c.caFile) {
      const text = await read(c.caFile, "certificate-authority");
      if (text !== undefined && text !== this.#caPem) {
        try {
          checkCaPem(text, `certificate-authority ${c.caFile}`);
          caPem = text;
          changed.push("certificate-authority");
        } catch (err) {
          errors.push((err as Error).message);
        }
      }
    }
    if (a.kind === "clientCertificate" && (a.certFile || a.keyFile)) {
      const certPem = a.certFile ? await read(a.certFile, "client-certificate") : pair?.certPem;
      const keyPem = a.keyFile ? await read(a.keyFile, "client-key") : pair?.keyPem;
      if (
        certPem !== undefined && keyPem !== undefined &&
        (certPem !== pair?.certPem || keyPem !== pair?.keyPem)
      ) {
        try {
          checkClientPair(certPem, keyPem, `client certificate ${a.certFile ?? ""}`);
          if (certPem !== pair?.certPem) changed.push("client-certificate");
          if (keyPem !== pair?.keyPem) changed.push("client-key");
          pair = { certPem, keyPem };
        } catch (err) {
          errors.push((err as Error).message);
        }
      }
    }
    if (a.kind === "tokenFile" && this.#auth) {
      const token = (await read(a.path, "token file"))?.trim();
      if (token && `Bearer ${token}` !== this.#auth.authorization) {
        this.#auth = {
          authorization: `Bearer ${token}`,
          expiresAtMs: this.#now() + TOKEN_FILE_REREAD_MS,
        };
      }
    }
    if (changed.length > 0 && !this.#closed) {
      const tlsPair = a.kind === "clientCertificate" ? pair : this.#execPair;
      try {
        // Build first: material Deno refuses (e.g. a key that does not match) is not adopted.
        const client = this.#makeClient(caPem, tlsPair);
        this.#caPem = caPem;
        this.#filePair = pair;
        this.#install(client, this.#materialKey());
      } catch (err) {
        errors.push((err as Error).message);
        changed.length = 0;
      }
    }
    this.#lastFileError = errors.length ? errors.join("; ") : undefined;
    if (changed.length > 0) this.#emitTls({ changed });
    return changed.length > 0;
  }

  #emitTls(c: TlsChange): void {
    for (const fn of [...this.#tlsListeners]) {
      try {
        fn(c);
      } catch { /* listeners must not break requests */ }
    }
  }

  /**
   * Drops the pooled connections: the next request opens a new connection, while requests in
   * flight finish on the old one (the old HTTP client is closed once no request is being sent
   * through it; responses already streaming are not affected). The cached credential is kept (no
   * token file read, no exec plugin run).
   *
   * Why: a connection that stalls (a middlebox black-holes it: no byte, no FIN, no RST) is kept
   * in the pool and a later request would be sent into it. client-go avoids this with HTTP/2
   * health-check pings (ReadIdleTimeout), which Deno's fetch does not offer; the client calls
   * this instead when a watch stays idle past its bound or a request times out.
   */
  resetConnections(): void {
    if (this.#closed || !this.#transport) return;
    try {
      this.#install(this.#makeClient(this.#caPem, this.#currentPair()), this.#transport.key);
    } catch { /* the material was usable a moment ago; keep the old client */ }
  }

  /** Closes the HTTP clients this provider made. */
  close(): void {
    this.#closed = true;
    this.#tlsListeners.clear();
    if (this.#transport) this.#closeTransport(this.#transport);
    for (const t of [...this.#retired]) this.#closeTransport(t);
  }

  async #refresh(): Promise<void> {
    const auth: AuthConfig = this.#config.auth;
    switch (auth.kind) {
      case "clientCertificate":
        this.#auth = { expiresAtMs: Infinity };
        return;
      case "token":
        this.#auth = { authorization: `Bearer ${auth.token}`, expiresAtMs: Infinity };
        return;
      case "tokenFile": {
        let token: string;
        try {
          token = (await Deno.readTextFile(auth.path)).trim();
        } catch (err) {
          throw new ConfigError(`cannot read token file ${auth.path}: ${(err as Error).message}`);
        }
        if (!token) throw new ConfigError(`token file ${auth.path} is empty`);
        this.#auth = {
          authorization: `Bearer ${token}`,
          expiresAtMs: this.#now() + TOKEN_FILE_REREAD_MS,
        };
        return;
      }
      case "exec":
        return await this.#runExec(auth.exec);
      default: {
        const never: never = auth;
        throw new ConfigError(`unknown auth kind ${JSON.stringify(never)}`);
      }
    }
  }

  async #runExec(exec: ExecConfig): Promise<void> {
    const out = await runExecPlugin(exec, this.#execEnv);
    if (out.token !== undefined) {
      this.#execPair = undefined;
      this.#auth = { authorization: `Bearer ${out.token}`, expiresAtMs: out.expiresAtMs };
      return;
    }
    const changed = this.#pairKey(out.pair) !== this.#pairKey(this.#execPair);
    this.#execPair = out.pair;
    this.#auth = { expiresAtMs: out.expiresAtMs };
    // A new certificate: build its client now, so that an unusable one fails this refresh.
    if (changed) {
      this.#currentTransport();
      this.#emitTls({ changed: ["exec"] });
    }
  }
}
