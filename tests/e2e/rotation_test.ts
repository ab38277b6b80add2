/**
 * S17: the credential files of a running operator are rotated, and it goes on without a restart.
 *
 * A second kube-apiserver runs on the test cluster's etcd with a serving certificate of its own,
 * signed by CA1. The operators reach it through a {@link TcpProxy} (a load balancer), with a
 * kubeconfig that names files: `certificate-authority` (CA1), `client-certificate` and
 * `client-key`. A serving certificate from another CA arrives the way a CA rotation rolls out: a
 * new apiserver serving it takes over behind the load balancer (the proxy moves to it and drops
 * the open connections). kube-apiserver does re-read its serving certificate files when they
 * change (in well under a second here), but a client that resumes its earlier TLS session (TLS
 * 1.3 session tickets, which Deno's rustls uses) is not shown the new certificate until the
 * apiserver restarts with new ticket keys, so a reload alone would not put the client's trust to
 * the test. While the operators run:
 * 1. the CA file gains CA2; an apiserver serving CA2's certificate takes over: a new AppService is
 *    reconciled within 90 s, with and without `--leader-elect`, no restart;
 * 2. CA1 leaves the CA file;
 * 3. an apiserver serving CA3's certificate takes over before the CA file has CA3: every request
 *    fails on TLS, /readyz and a log line say why; once the file gains CA3 it resumes within 90 s;
 * 4. the client certificate and key files are replaced by a certificate for another user: within
 *    90 s the operator's requests (and its watches, reconnected) come from that user (the
 *    apiserver's audit log).
 *
 * Everything runs on 127.0.0.1; every wait is bounded; the test stops what it started.
 */
import { MESSAGES } from "../../lib/runtime/messages.ts";
import { assert, assertEquals } from "../assert.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import { issueCertificate } from "../cluster/cluster.ts";
import { type SecondApiserver, startSecondApiserver } from "./apiserver2.ts";
import {
  admin,
  appService,
  cluster,
  dropNamespace,
  getAs,
  installCrd,
  kubeconfigFor,
  leaderChanges,
  newNamespace,
  type Operator,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";
import { TcpProxy } from "./proxy.ts";

/** Reconciles resume within this after a rotation (ms), as the scenario says. */
const RESUME_WITHIN_MS = 90_000;

/** Writes a file atomically (a temporary file renamed over it), as rotation tools do. */
async function replaceFile(path: string, text: string): Promise<void> {
  await Deno.writeTextFile(`${path}.tmp`, text, { mode: 0o600 });
  await Deno.rename(`${path}.tmp`, path);
}

/** Milliseconds from `since` until `ns/name` is Ready, or Infinity after `timeoutMs`. */
async function msUntilReady(ns: string, name: string, since: number, timeoutMs: number) {
  try {
    await waitFor(
      `${ns}/${name} Ready`,
      async () => (await getAs(ns, name)).status?.ready,
      timeoutMs,
      250,
    );
    return Date.now() - since;
  } catch {
    return Infinity;
  }
}

const logged = (op: Operator, message: string) => op.logs().filter((l) => l.message === message);

Deno.test("rotation S17: CA, serving certificate and client certificate files rotated while the operator runs; no restart", async (t) => {
  const info = await cluster();
  await installCrd();
  const c = await admin();
  const nsA = await newNamespace("s17a");
  const nsB = await newNamespace("s17b");
  const dir = await Deno.makeTempDir({ prefix: "s17-" });
  const pki = `${dir}/pki`;
  await Deno.mkdir(pki);
  const ops: Operator[] = [];
  let proxy: TcpProxy | undefined;
  const apiservers: SecondApiserver[] = [];
  try {
    // Three CAs, each with a serving certificate.
    const cas: { caPem: string; certFile: string; keyFile: string }[] = [];
    for (const n of [1, 2, 3]) {
      const ca = await issueCertificate({
        dir: pki,
        stem: `ca${n}`,
        subject: `/CN=s17-ca${n}`,
        kind: "ca",
      });
      const serving = await issueCertificate({
        dir: pki,
        stem: `serving${n}`,
        subject: "/CN=kube-apiserver",
        kind: "server",
        ca,
      });
      cas.push({ caPem: await Deno.readTextFile(ca.certFile), ...serving });
    }
    const auditLog = (n: number) => `${dir}/audit-${n}.log`;
    /** Starts an apiserver serving CA n's certificate, with its own audit log. */
    const apiserverWith = async (n: number) => {
      const started = await startSecondApiserver(info, {
        logFile: `${dir}/kube-apiserver-${n}.log`,
        tls: { certFile: cas[n].certFile, keyFile: cas[n].keyFile, caPem: cas[n].caPem },
        auditLog: auditLog(n),
      });
      apiservers.push(started);
      return started;
    };
    const px = proxy = TcpProxy.start((await apiserverWith(0)).port);

    // The operators' kubeconfig names files: CA, client certificate, client key.
    const caFile = `${dir}/ca.crt`;
    const clientCert = `${dir}/client.crt`;
    const clientKey = `${dir}/client.key`;
    const clusterPki = info.caCertFile.replace(/\/[^/]*$/, "");
    await replaceFile(caFile, cas[0].caPem);
    await replaceFile(clientCert, await Deno.readTextFile(`${clusterPki}/admin.crt`));
    await replaceFile(clientKey, await Deno.readTextFile(`${clusterPki}/admin.key`));
    const kubeconfig = await kubeconfigFor(px.url, dir, (cfg) => {
      for (const cl of cfg.clusters) {
        delete cl.cluster["certificate-authority-data"];
        cl.cluster["certificate-authority"] = caFile;
      }
      for (const u of cfg.users) {
        u.user = { "client-certificate": clientCert, "client-key": clientKey };
      }
    });

    // A: no leader election. B: a single replica with --leader-elect.
    const a = await startOperator([`--kubeconfig=${kubeconfig}`, `--watch-namespace=${nsA}`]);
    ops.push(a);
    const b = await startOperator([
      `--kubeconfig=${kubeconfig}`,
      `--watch-namespace=${nsB}`,
      "--leader-elect",
      `--leader-election-namespace=${nsB}`,
      "--leader-election-id=s17",
    ]);
    ops.push(b);
    await a.waitReady();
    await b.waitReady();
    await waitFor("B leads", () => logged(b, MESSAGES.acquiredLease).length > 0, 30_000);
    await c.create(APPSERVICES as never, appService(nsA, "before", { image: "nginx:1.27" }));
    await c.create(APPSERVICES as never, appService(nsB, "before", { image: "nginx:1.27" }));
    assert(await msUntilReady(nsA, "before", Date.now(), 60_000) < Infinity, "A: before");
    assert(await msUntilReady(nsB, "before", Date.now(), 60_000) < Infinity, "B: before");

    /**
     * An apiserver serving CA n's certificate takes over behind the proxy, which drops the open
     * connections; the previous apiserver stops. Resolves with the time of the switch.
     */
    const switchServing = async (n: number) => {
      const prev = apiservers.shift()!;
      const next = await apiserverWith(n);
      px.retarget(next.port);
      px.cut();
      px.resume();
      const at = Date.now();
      await prev.stop();
      return at;
    };

    await t.step(
      "1. CA file gains CA2, then an apiserver serving CA2's certificate takes over: resumes within 90 s",
      async () => {
        await replaceFile(caFile, cas[0].caPem + cas[1].caPem);
        await sleep(5_000);
        const switchedAt = await switchServing(1);
        await c.create(APPSERVICES as never, appService(nsA, "rotated", { image: "nginx:1.27" }));
        await c.create(APPSERVICES as never, appService(nsB, "rotated", { image: "nginx:1.27" }));
        const [msA, msB] = await Promise.all([
          msUntilReady(nsA, "rotated", switchedAt, 120_000),
          msUntilReady(nsB, "rotated", switchedAt, 120_000),
        ]);
        console.log(
          `S17: seconds from the serving-certificate switch to Ready: A (no leader election) ${
            msA / 1000
          }, B (--leader-elect) ${msB / 1000}`,
        );
        assert(msA <= RESUME_WITHIN_MS, `A: ${msA} ms`);
        assert(msB <= RESUME_WITHIN_MS, `B: ${msB} ms`);
      },
    );

    await t.step("2. CA1 leaves the CA file: still reconciling", async () => {
      await replaceFile(caFile, cas[1].caPem);
      const at = Date.now();
      await c.patch(APPSERVICES as never, "rotated", { spec: { replicas: 2 } }, { namespace: nsA });
      await waitFor(
        "A scaled to 2",
        async () => (await getAs(nsA, "rotated")).status?.readyReplicas === 2,
        60_000,
      );
      console.log(`after CA1 left the file: reconciled in ${(Date.now() - at) / 1000} s`);
    });

    await t.step("neither operator restarted nor lost the Lease", async () => {
      for (const op of [a, b]) assertEquals(logged(op, "Started").length, 1);
      // B (A has no Lease): acquired once, the same count that would show a loss.
      assertEquals(await leaderChanges(b, "lost"), 0);
      assertEquals(await leaderChanges(b, "acquired"), 1);
    });

    await t.step(
      "3. an apiserver serving CA3's certificate takes over before the file has CA3: /readyz says why; resumes once it does",
      async () => {
        // B would lose its Lease (renewals fail on TLS past the renew deadline) and exit 1, as it must.
        assertEquals(await b.stop(), 0);
        await switchServing(2);
        await c.create(APPSERVICES as never, appService(nsA, "blocked", { image: "nginx:1.27" }));
        const notReady = await waitFor(
          "A not ready, saying why",
          async () => {
            const r = await a.readyz();
            return r.status !== 200 && /UnknownIssuer|certificate/i.test(r.body) && r.body;
          },
          90_000,
          500,
        );
        console.log(`/readyz while the CA is not trusted:\n${notReady.trim()}`);
        const lines = a.logs().filter((l) => /UnknownIssuer|certificate/i.test(JSON.stringify(l)));
        assert(lines.length > 0, "no log line says why");
        const fixedAt = Date.now();
        await replaceFile(caFile, cas[1].caPem + cas[2].caPem);
        const ms = await msUntilReady(nsA, "blocked", fixedAt, 120_000);
        console.log(`S17: seconds from the CA file fix to Ready: ${ms / 1000}`);
        assert(ms <= RESUME_WITHIN_MS, `${ms} ms`);
        await a.waitReady(60_000);
      },
    );

    await t.step(
      "4. client certificate and key files replaced: the operator's requests come from the new user within 90 s",
      async () => {
        const cert = await issueCertificate({
          dir: pki,
          stem: "rotated-admin",
          subject: "/O=system:masters/CN=rotated-admin",
          kind: "client",
          ca: { certFile: info.caCertFile, keyFile: info.caKeyFile },
        });
        const rotatedAt = Date.now();
        await replaceFile(clientKey, await Deno.readTextFile(cert.keyFile));
        await replaceFile(clientCert, await Deno.readTextFile(cert.certFile));
        const byUser = async (user: string, verb?: string) => {
          const text = await Deno.readTextFile(auditLog(2));
          return text.split("\n").filter((l) => l.includes("appservice-operator/")).flatMap((l) => {
            try {
              const ev = JSON.parse(l);
              return ev.user?.username === user &&
                  ev.userAgent?.startsWith("appservice-operator/") &&
                  (!verb || ev.verb === verb) &&
                  Date.parse(ev.requestReceivedTimestamp) >= rotatedAt
                ? [ev]
                : [];
            } catch {
              return [];
            }
          });
        };
        const first = await waitFor(
          "a watch of the operator as rotated-admin",
          async () => (await byUser("rotated-admin", "watch"))[0],
          RESUME_WITHIN_MS,
          1_000,
        );
        console.log(
          `S17: the operator watched as the new user ${
            (Date.parse(first.requestReceivedTimestamp) - rotatedAt) / 1000
          } s after the client certificate files were replaced`,
        );
        await c.create(APPSERVICES as never, appService(nsA, "newcert", { image: "nginx:1.27" }));
        assert(await msUntilReady(nsA, "newcert", Date.now(), 60_000) < Infinity, "newcert");
        const since = Date.parse(first.requestReceivedTimestamp) + 5_000;
        const old = (await byUser("admin")).filter((e) =>
          Date.parse(e.requestReceivedTimestamp) > since
        );
        assertEquals(old.length, 0, `requests as the old user: ${JSON.stringify(old.slice(0, 2))}`);
      },
    );
  } finally {
    for (const op of ops) await op.stop("SIGTERM", 20_000);
    await proxy?.close();
    for (const started of apiservers) await started.stop();
    await dropNamespace(nsA);
    await dropNamespace(nsB);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});
