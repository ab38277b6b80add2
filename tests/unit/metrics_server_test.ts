/**
 * The /metrics server on 127.0.0.1 (lib/runtime/metrics_server.ts), with a reviewer standing in
 * for the apiserver: plain HTTP as before; HTTPS answering 401/403/500/503 with the bare status
 * text and 200 with the metrics; a changed `tls.crt`/`tls.key` served after the next reload check
 * on the same port, without a restart; a pair that does not load logged and the old one kept;
 * a missing cert-dir file refused at start; a port in use is AddrInUse, as with plain HTTP.
 */
import { assert, assertEquals, assertRejects } from "../assert.ts";
import { FakeClock } from "../../lib/runtime/clock.ts";
import {
  type AccessAttributes,
  DelegatedAuth,
  type Reviewer,
  type UserInfo,
} from "../../lib/runtime/delegated_auth.ts";
import { ApiError } from "../../lib/kube/errors.ts";
import type { Logger, LogProperties } from "../../lib/runtime/log.ts";
import { startMetricsServer } from "../../lib/runtime/metrics_server.ts";
import { selfSignedCertificate } from "../../lib/runtime/x509.ts";

const METRICS_TEXT = "# TYPE controller_runtime_reconcile_total counter\n";

/** A logger keeping its lines. */
function memoryLog(): Logger & { lines: { level: string; message: string }[] } {
  const lines: { level: string; message: string }[] = [];
  const at = (level: string) => (message: string, _p?: LogProperties) => {
    lines.push({ level, message });
  };
  const l = {
    lines,
    debug: at("debug"),
    info: at("info"),
    warn: at("warn"),
    error: at("error"),
    with: () => l,
  };
  return l;
}

/** "reader" may get /metrics, "other" may not; "broken" makes the TokenReview fail with 403. */
const reviewer: Reviewer = {
  tokenReview(token: string) {
    if (token === "broken") return Promise.reject(new ApiError(403, { reason: "Forbidden" }));
    if (token === "unreachable") return Promise.reject(new TypeError("connection refused"));
    const users: Record<string, UserInfo> = { reader: { username: "r" }, other: { username: "o" } };
    const user = users[token];
    return Promise.resolve(
      user ? { authenticated: true, user } : { authenticated: false, error: "invalid" },
    );
  },
  accessReview(user: UserInfo, attrs: AccessAttributes) {
    return Promise.resolve({ allowed: user.username === "r" && attrs.verb === "get" });
  },
};

async function get(url: string, client?: Deno.HttpClient, token?: string) {
  const r = await fetch(url, {
    client,
    headers: token ? { Authorization: `Bearer ${token}` } : {},
  });
  return { status: r.status, text: await r.text(), auth: r.headers.get("WWW-Authenticate") };
}

Deno.test("plain HTTP: /metrics as before, other paths 404", async () => {
  const ac = new AbortController();
  const s = await startMetricsServer({
    address: { hostname: "127.0.0.1", port: 0 },
    metrics: () => Promise.resolve({ text: METRICS_TEXT, contentType: "text/plain" }),
    signal: ac.signal,
    log: memoryLog(),
  });
  try {
    assertEquals(s.scheme, "http");
    assertEquals((await get(`http://127.0.0.1:${s.port}/metrics`)).text, METRICS_TEXT);
    assertEquals((await get(`http://127.0.0.1:${s.port}/other`)).status, 404);
  } finally {
    ac.abort();
    await s.finished;
  }
});

Deno.test("HTTPS: 401, 403, 500, 503 without detail; 200 with the metrics", async () => {
  const ac = new AbortController();
  const log = memoryLog();
  const s = await startMetricsServer({
    address: { hostname: "127.0.0.1", port: 0 },
    metrics: () => Promise.resolve({ text: METRICS_TEXT, contentType: "text/plain" }),
    // A short review timeout, so the transient failure is decided without waiting for retries.
    secure: { auth: new DelegatedAuth({ reviewer, reviewTimeoutMs: 50 }) },
    signal: ac.signal,
    log,
  });
  const client = Deno.createHttpClient({ caCerts: [s.certificate!.certPem] });
  const url = `https://127.0.0.1:${s.port}/metrics`;
  try {
    assertEquals(s.scheme, "https");
    assertEquals(s.certificate?.source, "self-signed");
    assertEquals(await get(url, client), {
      status: 401,
      text: "Unauthorized\n",
      auth: 'Bearer realm="metrics"',
    });
    assertEquals((await get(url, client, "forged")).text, "Unauthorized\n");
    assertEquals(await get(url, client, "other"), { status: 403, text: "Forbidden\n", auth: null });
    assertEquals(await get(url, client, "broken"), {
      status: 500,
      text: "Internal Server Error\n",
      auth: null,
    });
    assertEquals((await get(url, client, "unreachable")).status, 503);
    assertEquals(await get(url, client, "reader"), { status: 200, text: METRICS_TEXT, auth: null });
    assertEquals((await get(`https://127.0.0.1:${s.port}/debug`, client, "reader")).status, 404);
    // Review failures are logged with the reason; refusals only at debug level.
    const errors = log.lines.filter((l) => l.level === "error");
    assertEquals(errors.map((l) => l.message), [
      "Cannot check a metrics request",
      "Cannot check a metrics request",
    ]);
    assert(log.lines.some((l) => l.level === "debug" && l.message === "Forbidden metrics request"));
  } finally {
    client.close();
    ac.abort();
    await s.finished;
  }
});

Deno.test("cert dir: a new tls.crt/tls.key is served after the next check, same port", async () => {
  const dir = await Deno.makeTempDir({ prefix: "metrics-certs-" });
  const clock = new FakeClock();
  const log = memoryLog();
  const ac = new AbortController();
  const write = async (c: { certPem: string; keyPem: string }) => {
    await Deno.writeTextFile(`${dir}/tls.crt`, c.certPem);
    await Deno.writeTextFile(`${dir}/tls.key`, c.keyPem);
  };
  const a = await selfSignedCertificate();
  const b = await selfSignedCertificate();
  await write(a);
  const reads: boolean[] = []; // what certwatcher_read_certificate_{,errors_}total count
  const s = await startMetricsServer({
    address: { hostname: "127.0.0.1", port: 0 },
    metrics: () => Promise.resolve({ text: METRICS_TEXT, contentType: "text/plain" }),
    secure: {
      auth: new DelegatedAuth({ reviewer }),
      certDir: dir,
      reloadIntervalMs: 10_000,
      onCertificateRead: (ok) => reads.push(ok),
    },
    signal: ac.signal,
    log,
    clock,
  });
  const trustA = Deno.createHttpClient({ caCerts: [a.certPem] });
  const trustB = Deno.createHttpClient({ caCerts: [b.certPem] });
  const url = `https://127.0.0.1:${s.port}/metrics`;
  /** Moves the clock past one check and waits (bounded) until `done` holds. */
  const checkUntil = async (done: () => boolean) => {
    clock.advance(10_000);
    for (let i = 0; i < 200 && !done(); i++) await new Promise((r) => setTimeout(r, 10));
    assert(done(), "the check did not happen");
  };
  try {
    assertEquals(s.certificate?.source, `--metrics-cert-dir ${dir}`);
    assertEquals((await get(url, trustA, "reader")).status, 200);
    assertEquals(reads, [true], "the read at start");

    await write(b);
    const reloaded = () =>
      log.lines.some((l) => l.message === "Reloaded the metrics serving certificate");
    await checkUntil(reloaded);
    assertEquals(reads, [true, true]);
    assertEquals(s.certificate?.certPem, b.certPem);
    assertEquals((await get(url, trustB, "reader")).status, 200);
    // A new connection trusting only the old certificate fails: it is not served any more.
    const onlyA = Deno.createHttpClient({ caCerts: [a.certPem] });
    try {
      await assertRejects(() => get(url, onlyA, "reader"));
    } finally {
      onlyA.close();
    }

    // A key that is not the certificate's: logged once, the served pair stays.
    await Deno.writeTextFile(`${dir}/tls.key`, a.keyPem);
    const warned = () =>
      log.lines.filter((l) => l.message.startsWith("Metrics certificate not reloaded")).length;
    await checkUntil(() => warned() === 1);
    await checkUntil(() => reads.length === 4);
    assertEquals(warned(), 1, "a bad pair is reported once");
    assertEquals(reads, [true, true, false, false], "but each read of it is an error");
    assertEquals(s.certificate?.certPem, b.certPem);
    assertEquals((await get(url, trustB, "reader")).status, 200);
  } finally {
    trustA.close();
    trustB.close();
    ac.abort();
    await s.finished;
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("cert dir without tls.crt: refused at start, naming the file", async () => {
  const dir = await Deno.makeTempDir({ prefix: "metrics-certs-" });
  try {
    await assertRejects(
      () =>
        startMetricsServer({
          address: { hostname: "127.0.0.1", port: 0 },
          metrics: () => Promise.resolve({ text: "", contentType: "text/plain" }),
          secure: { auth: new DelegatedAuth({ reviewer }), certDir: dir },
          signal: AbortSignal.abort(),
          log: memoryLog(),
        }),
      /cannot read .*tls\.crt/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("HTTPS on a port in use: AddrInUse, as Deno.serve throws for plain HTTP", async () => {
  const taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  try {
    await assertRejects(
      () =>
        startMetricsServer({
          address: { hostname: "127.0.0.1", port: (taken.addr as Deno.NetAddr).port },
          metrics: () => Promise.resolve({ text: "", contentType: "text/plain" }),
          secure: { auth: new DelegatedAuth({ reviewer }) },
          signal: AbortSignal.abort(),
          log: memoryLog(),
        }),
      /in use/,
    );
  } finally {
    taken.close();
  }
});
