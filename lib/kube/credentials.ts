/**
 * Turns an {@link AuthConfig} into what each request presents: an `Authorization` header and/or
 * the TLS client certificate of a `Deno.HttpClient`.
 *
 * Rules (client-go `transport` and `plugin/pkg/client/auth/exec`):
 * - tokenFile is re-read when older than {@link TOKEN_FILE_REREAD_MS} (client-go re-reads bound
 *   service account tokens every minute) and after a 401.
 * - An exec plugin's ExecCredential is cached until its `expirationTimestamp` (or forever without
 *   one) and the plugin is run again after a 401.
 * - A credential that cannot be produced throws {@link ConfigError}; no request goes out without it.
 * - Connections are HTTP/1.1 (as kube-rs's client), not HTTP/2: Deno's fetch over HTTP/2 stalls
 *   ~40 ms on about one large response in seven (a 500-object list page; measured against a Go
 *   net/http server, which a Go client reads without stalls, and against kube-apiserver 1.36:
 *   mean 16.1 ms per page over HTTP/2 against 10.5 ms over HTTP/1.1). A consistent list of 10,000
 *   ConfigMaps in pages of 500 syncs in ~183 ms instead of ~272 ms. Each request in flight has a
 *   connection of its own; idle ones are pooled and reused.
 *
 * @module
 */
import type { AuthConfig, ClusterConfig, ExecConfig } from "./config.ts";
import { ConfigError } from "./errors.ts";

/** How long a token read from a file is used before the file is read again (ms). */
export const TOKEN_FILE_REREAD_MS = 60_000;
/** An exec credential plugin that has not answered after this long is killed (ms). */
export const EXEC_TIMEOUT_MS = 30_000;

/** What one request presents. */
export interface Credential {
  /** Value for the Authorization header, e.g. `Bearer abc`, if any. */
  authorization?: string;
  /** The HTTP client carrying the trusted CA and, for certificate auth, the client certificate. */
  httpClient: Deno.HttpClient;
}

/** Produces the current credential and drops it when the apiserver answers 401. */
export class CredentialProvider {
  #config: ClusterConfig;
  #baseClient?: Deno.HttpClient;
  /** The credential in use; `cert` is kept for {@link resetConnections} to rebuild its client. */
  #cached?: { cred: Credential; expiresAtMs: number; cert?: { certPem: string; keyPem: string } };
  #now: () => number;
  #pending?: Promise<Credential>;

  /**
   * A provider of `config`'s credential; nothing is read or run until it is first asked for.
   * @param config the resolved connection
   * @param now clock in ms (injected for tests)
   */
  constructor(config: ClusterConfig, now: () => number = Date.now) {
    this.#config = config;
    this.#now = now;
  }

  #makeClient(cert?: { certPem: string; keyPem: string }): Deno.HttpClient {
    // HTTP/1.1 only: see the module doc.
    const opts: Deno.CreateHttpClientOptions = { http1: true, http2: false };
    if (this.#config.caPem) opts.caCerts = [this.#config.caPem];
    if (this.#config.proxyUrl) opts.proxy = { url: this.#config.proxyUrl };
    if (cert) {
      (opts as Record<string, unknown>).cert = cert.certPem;
      (opts as Record<string, unknown>).key = cert.keyPem;
    }
    try {
      return Deno.createHttpClient(opts);
    } catch (err) {
      throw new ConfigError(
        `cannot use the TLS material of ${this.#config.source}: ${(err as Error).message}`,
      );
    }
  }

  #base(): Deno.HttpClient {
    return this.#baseClient ??= this.#makeClient();
  }

  /**
   * The credential for the next request; runs the exec plugin or reads the token file if due.
   * Rejects with the signal's reason when `signal` aborts first (the refresh itself goes on for
   * other callers, bounded by {@link EXEC_TIMEOUT_MS}), so a hung plugin cannot hold up a Lease
   * renewal past its deadline.
   */
  get(signal?: AbortSignal): Promise<Credential> {
    const c = this.#cached;
    if (c && this.#now() < c.expiresAtMs) return Promise.resolve(c.cred);
    // One refresh at a time; concurrent callers share it.
    this.#pending ??= this.#refresh().finally(() => this.#pending = undefined);
    if (!signal) return this.#pending;
    if (signal.aborted) return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
      const onAbort = () => reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
      this.#pending!.then(resolve, reject).finally(() =>
        signal.removeEventListener("abort", onAbort)
      );
    });
  }

  /** Forgets the cached credential (after a 401), so the next {@link get} fetches a fresh one. */
  invalidate(): void {
    this.#cached = undefined;
  }

  /**
   * Drops the pooled connections: the next request opens a new connection, while requests in
   * flight finish on the old one (closing a `Deno.HttpClient` does not end them). The cached
   * credential is kept (no token file read, no exec plugin run).
   *
   * Why: `fetch` speaks HTTP/2 to the apiserver, so every request of a client shares ONE
   * connection. When that connection stalls (a middlebox black-holes it: no byte, no FIN, no
   * RST), aborting the request that noticed only resets its HTTP/2 stream, and every later
   * request would be sent into the same dead connection. client-go avoids this with HTTP/2
   * health-check pings (ReadIdleTimeout), which Deno's fetch does not offer; the client calls
   * this instead when a watch stays idle past its bound or a request times out.
   */
  resetConnections(): void {
    const old = new Set([this.#baseClient, this.#cached?.cred.httpClient]);
    this.#baseClient = undefined;
    const c = this.#cached;
    if (c) {
      const httpClient = c.cert ? this.#makeClient(c.cert) : this.#base();
      this.#cached = { ...c, cred: { ...c.cred, httpClient } };
    }
    for (const h of old) {
      try {
        h?.close();
      } catch { /* already closed */ }
    }
  }

  /** Closes the HTTP clients this provider made. */
  close(): void {
    try {
      this.#baseClient?.close();
    } catch { /* already closed */ }
    if (this.#cached && this.#cached.cred.httpClient !== this.#baseClient) {
      try {
        this.#cached.cred.httpClient.close();
      } catch { /* already closed */ }
    }
  }

  async #refresh(): Promise<Credential> {
    const auth: AuthConfig = this.#config.auth;
    switch (auth.kind) {
      case "clientCertificate": {
        const cert = { certPem: auth.certPem, keyPem: auth.keyPem };
        const cred = { httpClient: this.#makeClient(cert) };
        this.#cached = { cred, expiresAtMs: Infinity, cert };
        return cred;
      }
      case "token": {
        const cred = { authorization: `Bearer ${auth.token}`, httpClient: this.#base() };
        this.#cached = { cred, expiresAtMs: Infinity };
        return cred;
      }
      case "tokenFile": {
        let token: string;
        try {
          token = (await Deno.readTextFile(auth.path)).trim();
        } catch (err) {
          throw new ConfigError(`cannot read token file ${auth.path}: ${(err as Error).message}`);
        }
        if (!token) throw new ConfigError(`token file ${auth.path} is empty`);
        const cred = { authorization: `Bearer ${token}`, httpClient: this.#base() };
        this.#cached = { cred, expiresAtMs: this.#now() + TOKEN_FILE_REREAD_MS };
        return cred;
      }
      case "exec":
        return await this.#runExec(auth.exec);
      default: {
        const never: never = auth;
        throw new ConfigError(`unknown auth kind ${JSON.stringify(never)}`);
      }
    }
  }

  async #runExec(exec: ExecConfig): Promise<Credential> {
    const command = exec.command.includes("/") && !exec.command.startsWith("/")
      ? `${exec.baseDir}/${exec.command}`
      : exec.command;
    const env: Record<string, string> = {};
    for (const e of exec.env ?? []) env[e.name] = e.value;
    env.KUBERNETES_EXEC_INFO = JSON.stringify({
      apiVersion: exec.apiVersion,
      kind: "ExecCredential",
      spec: { interactive: false },
    });
    const out = await runBounded(command, exec.args ?? [], env, EXEC_TIMEOUT_MS);
    if (out.timedOut) {
      throw new ConfigError(
        `exec plugin ${command} gave no answer within ${EXEC_TIMEOUT_MS / 1000} s and was killed`,
      );
    }
    if (out.code !== 0) {
      const stderr = out.stderr.trim().split("\n").pop() ?? "";
      throw new ConfigError(`exec plugin ${command} exited with code ${out.code}: ${stderr}`);
    }
    // deno-lint-ignore no-explicit-any
    let ec: any;
    try {
      ec = JSON.parse(out.stdout);
    } catch {
      throw new ConfigError(`exec plugin ${command} did not print an ExecCredential as JSON`);
    }
    if (ec?.kind !== "ExecCredential" || !ec.status) {
      throw new ConfigError(`exec plugin ${command} printed no ExecCredential status`);
    }
    const s = ec.status;
    const expiresAtMs = s.expirationTimestamp ? Date.parse(s.expirationTimestamp) : Infinity;
    let cred: Credential;
    let cert: { certPem: string; keyPem: string } | undefined;
    if (s.token) {
      cred = { authorization: `Bearer ${s.token}`, httpClient: this.#base() };
    } else if (s.clientCertificateData && s.clientKeyData) {
      if (this.#cached && this.#cached.cred.httpClient !== this.#baseClient) {
        try {
          this.#cached.cred.httpClient.close();
        } catch { /* ignore */ }
      }
      cert = { certPem: s.clientCertificateData, keyPem: s.clientKeyData };
      cred = { httpClient: this.#makeClient(cert) };
    } else {
      throw new ConfigError(
        `exec plugin ${command}: ExecCredential status has neither token nor client certificate and key`,
      );
    }
    this.#cached = {
      cred,
      expiresAtMs: Number.isNaN(expiresAtMs) ? Infinity : expiresAtMs,
      cert,
    };
    return cred;
  }
}

/**
 * Runs a command with stdin closed and collects stdout/stderr as text, killing it (SIGKILL) after
 * `timeoutMs`. Does not wait for pipes that a leftover grandchild keeps open once the command
 * itself has exited or been killed (a plugin script whose `sleep` outlives it).
 * @throws ConfigError when the command cannot be started.
 */
async function runBounded(
  command: string,
  args: string[],
  env: Record<string, string>,
  timeoutMs: number,
): Promise<{ code: number; stdout: string; stderr: string; timedOut: boolean }> {
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(command, {
      args,
      env,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    })
      .spawn();
  } catch (err) {
    throw new ConfigError(`exec plugin ${command} could not run: ${(err as Error).message}`);
  }
  const collect = (stream: ReadableStream<Uint8Array>) => {
    const reader = stream.getReader();
    const chunks: Uint8Array[] = [];
    const done = (async () => {
      try {
        while (true) {
          const r = await reader.read();
          if (r.done) break;
          chunks.push(r.value);
        }
      } catch { /* cancelled */ }
    })();
    return {
      done,
      cancel: () => reader.cancel().catch(() => {}),
      text: () => new TextDecoder().decode(new Uint8Array(chunks.flatMap((c) => [...c]))),
    };
  };
  const out = collect(child.stdout);
  const err = collect(child.stderr);
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    try {
      child.kill("SIGKILL");
    } catch { /* gone */ }
  }, timeoutMs);
  const status = await child.status;
  clearTimeout(timer);
  // Give the pipes a moment to drain, then stop waiting for them.
  const drained = Promise.all([out.done, err.done]);
  const grace = new Promise<void>((r) => {
    const t = setTimeout(r, 1_000);
    drained.finally(() => clearTimeout(t));
  });
  await Promise.race([drained, grace]);
  await Promise.all([out.cancel(), err.cancel()]);
  return { code: status.code, stdout: out.text(), stderr: err.text(), timedOut };
}
