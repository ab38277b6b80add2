/**
 * A replay apiserver for the watch benchmark: serves a recorded ConfigMap list (paged with
 * `limit`/`continue`, or whole) and a recorded watch stream over TLS at 127.0.0.1, so that
 * both clients decode the very same bytes and the apiserver's own speed drops out of the
 * measurement. A watch from the list's resourceVersion gets every recorded event at once, then
 * stays open without sending (as an idle watch does) until the client goes or `timeoutSeconds`.
 *
 * @module
 */

/** A recording: the list at `listResourceVersion` and the watch events after it. */
export interface Recording {
  namespace: string;
  listResourceVersion: string;
  /** Items as the apiserver listed them (kind/apiVersion omitted, as in a list). */
  items: unknown[];
  /** Watch events after the list, as the apiserver sent them (`{type, object}`). */
  events: { type: string; object: unknown }[];
}

/** A running replay server. */
export interface ReplayServer {
  url: string;
  /** Requests served, by `list` / `watch` / `other`. */
  counts: Record<string, number>;
  close(): Promise<void>;
}

/** Longest a replayed watch stays open (ms) when the client asks for no timeout. */
const MAX_WATCH_MS = 15 * 60_000;
/** Bytes per chunk of the replayed watch stream. */
const CHUNK_BYTES = 64 * 1024;

/** A TLS serving certificate and key (PEM), and the CA that signed it. */
export interface ServingCert {
  certPem: string;
  keyPem: string;
  caPem: string;
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
  };
}

/** Starts the server on 127.0.0.1 (kernel-chosen port), over TLS with `tls`. */
export function startReplayServer(rec: Recording, tls: ServingCert): ReplayServer {
  const enc = new TextEncoder();
  const lastRv = (rec.events.at(-1)?.object as { metadata?: { resourceVersion?: string } })
    ?.metadata?.resourceVersion ?? rec.listResourceVersion;
  // The stream, pre-encoded in chunks.
  const chunks: Uint8Array<ArrayBuffer>[] = [];
  let pending = "";
  for (const ev of rec.events) {
    pending += JSON.stringify(ev) + "\n";
    if (pending.length >= CHUNK_BYTES) {
      chunks.push(enc.encode(pending));
      pending = "";
    }
  }
  if (pending) chunks.push(enc.encode(pending));
  const pages = new Map<string, Uint8Array<ArrayBuffer>>();
  const listBody = (limit: number, offset: number): Uint8Array<ArrayBuffer> => {
    const key = `${limit}:${offset}`;
    let body = pages.get(key);
    if (!body) {
      const end = limit > 0 ? Math.min(rec.items.length, offset + limit) : rec.items.length;
      const metadata: Record<string, unknown> = { resourceVersion: rec.listResourceVersion };
      if (end < rec.items.length) {
        metadata.continue = String(end);
        metadata.remainingItemCount = rec.items.length - end;
      }
      body = enc.encode(JSON.stringify({
        kind: "ConfigMapList",
        apiVersion: "v1",
        metadata,
        items: rec.items.slice(offset, end),
      }));
      pages.set(key, body);
    }
    return body;
  };
  const counts: Record<string, number> = { list: 0, watch: 0, other: 0 };
  const ac = new AbortController();
  const server = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    cert: tls.certPem,
    key: tls.keyPem,
    signal: ac.signal,
    onListen: () => {},
  }, (req) => {
    const url = new URL(req.url);
    const collection = `/api/v1/namespaces/${rec.namespace}/configmaps`;
    if (
      req.method !== "GET" || (url.pathname !== collection && url.pathname !== "/api/v1/configmaps")
    ) {
      counts.other++;
      return Response.json({
        kind: "Status",
        apiVersion: "v1",
        status: "Failure",
        reason: "NotFound",
        code: 404,
        message: `replay server: no ${req.method} ${url.pathname}`,
      }, { status: 404 });
    }
    const q = url.searchParams;
    if (q.get("watch") === "true" || q.get("watch") === "1") {
      counts.watch++;
      const from = q.get("resourceVersion") ?? "";
      const timeoutMs = Math.min(
        MAX_WATCH_MS,
        Number(q.get("timeoutSeconds") || 0) * 1000 ||
          MAX_WATCH_MS,
      );
      const send = from === rec.listResourceVersion ? chunks : [];
      if (from !== rec.listResourceVersion && from !== lastRv) {
        const status = {
          type: "ERROR",
          object: {
            kind: "Status",
            apiVersion: "v1",
            status: "Failure",
            reason: "Expired",
            code: 410,
            message: `replay server: resourceVersion ${from} is not replayable`,
          },
        };
        return new Response(JSON.stringify(status) + "\n", {
          headers: { "content-type": "application/json" },
        });
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          for (const c of send) controller.enqueue(c);
          const end = () => {
            try {
              controller.close();
            } catch { /* already closed */ }
          };
          timer = setTimeout(end, timeoutMs);
          // A client that goes away cancels the stream (cancel below).
          ac.signal.addEventListener("abort", () => {
            clearTimeout(timer);
            end();
          }, { once: true });
        },
        cancel() {
          clearTimeout(timer);
        },
      });
      return new Response(body, { headers: { "content-type": "application/json" } });
    }
    counts.list++;
    const limit = Number(q.get("limit") || 0);
    const offset = Number(q.get("continue") || 0);
    return new Response(listBody(limit, offset), {
      headers: { "content-type": "application/json" },
    });
  });
  return {
    url: `https://127.0.0.1:${(server.addr as Deno.NetAddr).port}`,
    counts,
    async close() {
      ac.abort();
      await server.finished;
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
