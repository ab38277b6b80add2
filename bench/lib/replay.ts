/**
 * The replay apiserver of the watch benchmark: bench/replay, a Go program on the
 * kube-apiserver's own HTTP stack (net/http + crypto/tls: HTTP/2 when the client offers it by
 * ALPN, HTTP/1.1 otherwise), serves a recorded ConfigMap list (paged with `limit`/`continue`, or
 * whole) and a recorded watch stream over TLS at 127.0.0.1, so that both clients decode the very
 * same bytes and the apiserver's own speed drops out of the measurement. A watch from the list's
 * resourceVersion gets every recorded event at once, then stays open without sending (as an idle
 * watch does) until the client goes or `timeoutSeconds`. bench/replay/main.go has the details.
 *
 * It replaces a `Deno.serve` server, whose HTTP/1.1 held back small responses for ~45 ms (Nagle
 * and delayed ACK) and whose HTTP/2 differed from the apiserver's: a benchmark of clients should
 * be served as the apiserver serves them.
 *
 * @module
 */
import { join } from "node:path";
import { goBuild } from "./operators.ts";

/** A recording: the list at `listResourceVersion` and the watch events after it. */
export interface Recording {
  namespace: string;
  listResourceVersion: string;
  /** Items as the apiserver listed them (kind/apiVersion omitted, as in a list). */
  items: unknown[];
  /** Watch events after the list, as the apiserver sent them (`{type, object}`). */
  events: { type: string; object: unknown }[];
}

/** A running replay server (a child process). */
export interface ReplayServer {
  /** `https://127.0.0.1:<port>`. */
  url: string;
  /**
   * Requests served, by `list` / `watch` / `other` and by protocol (`http1` / `http2`): all 0
   * until {@link ReplayServer.close}, which fills them in from the server's report as it exits.
   */
  counts: Record<string, number>;
  /** Stops the server (closes its stdin; SIGTERM, then SIGKILL, if it lingers) and waits for it. */
  close(): Promise<void>;
}

/** A TLS serving certificate and key (PEM, and the files holding them), and the CA that signed it. */
export interface ServingCert {
  certPem: string;
  keyPem: string;
  caPem: string;
  certFile: string;
  keyFile: string;
}

/**
 * Makes a serving certificate for 127.0.0.1 signed by the local cluster's CA (openssl CLI), so
 * both clients verify TLS to the replay server exactly as they do to the apiserver.
 */
export async function makeServingCert(
  caCertFile: string,
  caKeyFile: string,
  dir: string,
): Promise<ServingCert> {
  await Deno.mkdir(dir, { recursive: true });
  const key = `${dir}/replay.key`, csr = `${dir}/replay.csr`, crt = `${dir}/replay.crt`;
  const ext = `${dir}/replay.ext`;
  await Deno.writeTextFile(
    ext,
    "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n" +
      "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
  );
  const run = async (args: string[]) => {
    const r = await new Deno.Command("openssl", { args, stdin: "null", stderr: "piped" }).output();
    if (!r.success) {
      throw new Error(`openssl ${args[0]} failed: ${new TextDecoder().decode(r.stderr)}`);
    }
  };
  await run([
    "req",
    "-new",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
    "-keyout",
    key,
    "-out",
    csr,
    "-subj",
    "/CN=replay-apiserver",
  ]);
  await run([
    "x509",
    "-req",
    "-in",
    csr,
    "-CA",
    caCertFile,
    "-CAkey",
    caKeyFile,
    "-set_serial",
    String(Date.now()),
    "-days",
    "2",
    "-extfile",
    ext,
    "-out",
    crt,
  ]);
  return {
    certPem: await Deno.readTextFile(crt),
    keyPem: await Deno.readTextFile(key),
    caPem: await Deno.readTextFile(caCertFile),
    certFile: crt,
    keyFile: key,
  };
}

/** Path of the replay server binary in the cache. */
export function replayBinary(cacheDir: string): string {
  return join(cacheDir, "bench", "appservice-bench-replay");
}

/**
 * Builds the replay server (`go build` in bench/replay, standard library only) into the cache.
 * @throws Error with the compiler output on failure.
 */
export function buildReplayServer(cacheDir: string): Promise<string> {
  return goBuild("replay", replayBinary(cacheDir));
}

/** How {@link startReplayServer} runs the server. */
export interface ReplayServerOptions {
  /** The binary ({@link buildReplayServer}). */
  binary: string;
  /** The {@link Recording} as JSON (what `bench:watch --recording` saves). */
  recordingFile: string;
  tls: ServingCert;
  /** Longest wait for the server to load the recording and listen (default 60 s). */
  startTimeoutMs?: number;
}

/** How long {@link ReplayServer.close} waits after closing stdin, and then after SIGTERM. */
const STOP_WAIT_MS = 10_000;

/** `p`'s value, or `undefined` when `p` has not settled in `ms` (the timer is cleared). */
async function within<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<undefined>((resolve) => timer = setTimeout(() => resolve(undefined), ms)),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Starts the server on 127.0.0.1 (kernel-chosen port), over TLS with `tls`, and resolves once it
 * listens. Its stdin is a pipe from this process: when this process goes, so does the server.
 * Its stderr is this process's. @throws Error when it exits or does not listen in time.
 */
export async function startReplayServer(o: ReplayServerOptions): Promise<ReplayServer> {
  const child = new Deno.Command(o.binary, {
    args: ["-recording", o.recordingFile, "-cert", o.tls.certFile, "-key", o.tls.keyFile],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const stdin = child.stdin.getWriter();
  // Its stdout: the URL line once listening, the counts line on exit.
  const lines: string[] = [];
  let firstLine: (line: string) => void = () => {};
  const listening = new Promise<string>((resolve) => firstLine = resolve);
  const reading = (async () => {
    let buf = "";
    for await (const text of child.stdout.pipeThrough(new TextDecoderStream())) {
      buf += text;
      const parts = buf.split("\n");
      buf = parts.pop()!;
      lines.push(...parts);
      if (lines.length > 0) firstLine(lines[0]);
    }
    if (buf) lines.push(buf);
  })();
  const stop = async () => {
    await stdin.close().catch(() => {/* exited already */});
    for (const signal of ["SIGTERM", "SIGKILL"] as const) {
      if (await within(child.status, STOP_WAIT_MS)) break;
      try {
        child.kill(signal);
      } catch { /* exited meanwhile */ }
    }
    await child.status;
    await reading;
  };
  const url = await within(
    Promise.race([listening, child.status.then(() => undefined)]),
    o.startTimeoutMs ?? 60_000,
  );
  if (!url || !/^https:\/\/127\.0\.0\.1:\d+$/.test(url)) {
    await stop();
    const { code } = await child.status;
    throw new Error(
      url === undefined
        ? `replay server did not listen (exit code ${code}; its stderr is above)`
        : `replay server printed ${JSON.stringify(url)}, not its URL`,
    );
  }
  const counts: Record<string, number> = { list: 0, watch: 0, other: 0, http1: 0, http2: 0 };
  return {
    url,
    counts,
    async close() {
      await stop();
      const report = lines.at(-1);
      if (lines.length > 1 && report?.startsWith("{")) Object.assign(counts, JSON.parse(report));
    },
  };
}

/** A kubeconfig for `server` (CA `caPem`) with a bearer token (the replay server checks none). */
export function replayKubeconfig(server: string, caPem: string): string {
  return `apiVersion: v1
kind: Config
clusters:
  - name: replay
    cluster:
      server: ${server}
      certificate-authority-data: ${btoa(caPem)}
users:
  - name: replay
    user:
      token: bench-replay-token
contexts:
  - name: replay
    context:
      cluster: replay
      user: replay
current-context: replay
`;
}
