/**
 * Secure /metrics on the local control plane (issue 16), the way kubebuilder v4 scaffolds it: the
 * operator run with `--metrics-secure` serves HTTPS and lets a scrape through only when the
 * apiserver authenticates its bearer token (TokenReview) and authorizes its user for `get` on
 * `/metrics` (SubjectAccessReview).
 *
 * - anonymous → 401; a ServiceAccount without the role → 403; one bound to deploy/'s
 *   metrics-reader ClusterRole → 200 with controller-runtime's metric names;
 * - tokens the apiserver rejects → 401: one signed by the cluster's real key but expired, one with
 *   valid claims signed by a foreign key, one bound to a Secret that was then deleted;
 * - the requests a scrape adds to the apiserver (audit log: 2 with a cold cache, 0 warm) and the
 *   added latency against plain mode (logged, not asserted);
 * - plain mode (`--metrics-secure=false`) answers as before;
 * - with leader election, the leader and the standby both answer (the reviews are no leader's
 *   writes); an operator that may not create TokenReviews answers 500 and logs why;
 * - a new tls.crt/tls.key in `--metrics-cert-dir` is served without a restart; a cert dir without
 *   them stops the start with one line;
 * - deploy/'s Service, metrics-reader ClusterRole and NetworkPolicy pass the apiserver's
 *   validation (server-side dry run).
 *
 * Every address is 127.0.0.1; every wait is bounded.
 */
import { parse as parseYaml } from "yaml";
import { assert, assertEquals } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import { NAMESPACES, type ResourceType, SERVICES } from "../../lib/kube/resources.ts";
import {
  admin,
  cluster,
  dropNamespace,
  installCrd,
  metricSum,
  newNamespace,
  type Operator,
  REPO,
  startOperator,
  waitFor,
} from "./harness.ts";
import { auditEvents } from "./audit.ts";
import { CLUSTER_ROLES, mintToken, rt, writeTokenKubeconfig } from "./resources.ts";
import {
  bindMetricsReader,
  createServiceAccounts,
  scrape,
  servedCertificate,
} from "./secure_metrics.ts";

const SECRETS = rt("v1", "Secret", "secrets", true);
const NETWORK_POLICIES = rt(
  "networking.k8s.io/v1",
  "NetworkPolicy",
  "networkpolicies",
  true,
);
const TOKEN_REVIEWS = rt("authentication.k8s.io/v1", "TokenReview", "tokenreviews", false);

/** Names controller-runtime exports that every scrape must show (TYPE lines exist from start). */
const CONTROLLER_RUNTIME_NAMES = [
  "controller_runtime_reconcile_total",
  "controller_runtime_reconcile_errors_total",
  "controller_runtime_reconcile_time_seconds",
  "workqueue_depth",
  "workqueue_adds_total",
  "workqueue_queue_duration_seconds",
  "workqueue_work_duration_seconds",
  "workqueue_retries_total",
  "rest_client_requests_total",
  "leader_election_master_status",
];

const b64url = (bytes: Uint8Array) =>
  btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
const fromB64url = (s: string) =>
  Uint8Array.from(atob(s.replace(/-/g, "+").replace(/_/g, "/")), (ch) => ch.charCodeAt(0));

/** The DER bytes of a PEM block. */
function pemDer(pem: string): Uint8Array<ArrayBuffer> {
  const b64 = pem.replace(/-----[A-Z ]+-----/g, "").replace(/\s+/g, "");
  return Uint8Array.from(atob(b64), (ch) => ch.charCodeAt(0));
}

/**
 * `token` (a JWT from the TokenRequest API) with its claims changed by `edit` and signed RS256
 * with `key` (the header, key id included, kept).
 */
async function resign(
  token: string,
  key: CryptoKey,
  edit: (claims: Record<string, unknown>) => void,
): Promise<string> {
  const [header, payload] = token.split(".");
  const claims = JSON.parse(new TextDecoder().decode(fromB64url(payload)));
  edit(claims);
  const body = `${header}.${b64url(new TextEncoder().encode(JSON.stringify(claims)))}`;
  const sig = await crypto.subtle.sign("RSASSA-PKCS1-v1_5", key, new TextEncoder().encode(body));
  return `${body}.${b64url(new Uint8Array(sig))}`;
}

const RS256 = { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" };

/** Runs openssl; throws with its stderr on failure. */
async function openssl(args: string[]): Promise<void> {
  const out = await new Deno.Command("openssl", { args, stdout: "null", stderr: "piped" })
    .output();
  if (!out.success) throw new Error(`openssl ${args[0]}: ${new TextDecoder().decode(out.stderr)}`);
}

/** A CA made by openssl (as cert-manager's CA issuer would be); its PEM. */
async function opensslCa(dir: string): Promise<string> {
  await openssl([
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-days",
    "1",
    "-subj",
    "/CN=e2e-metrics-ca",
    "-keyout",
    `${dir}/ca.key`,
    "-out",
    `${dir}/ca.crt`,
  ]);
  return await Deno.readTextFile(`${dir}/ca.crt`);
}

/** A serving certificate for 127.0.0.1/localhost signed by {@link opensslCa}'s CA (RSA). */
async function opensslCertificate(dir: string, name: string) {
  await Deno.writeTextFile(
    `${dir}/${name}.ext`,
    "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n" +
      "extendedKeyUsage=serverAuth\n",
  );
  await openssl([
    "req",
    "-new",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-subj",
    `/CN=${name}`,
    "-keyout",
    `${dir}/${name}.key`,
    "-out",
    `${dir}/${name}.csr`,
  ]);
  await openssl([
    "x509",
    "-req",
    "-in",
    `${dir}/${name}.csr`,
    "-CA",
    `${dir}/ca.crt`,
    "-CAkey",
    `${dir}/ca.key`,
    "-CAcreateserial",
    "-days",
    "1",
    "-extfile",
    `${dir}/${name}.ext`,
    "-out",
    `${dir}/${name}.crt`,
  ]);
  return {
    certPem: await Deno.readTextFile(`${dir}/${name}.crt`),
    keyPem: await Deno.readTextFile(`${dir}/${name}.key`),
  };
}

/** Writes tls.crt and tls.key of `pair` into `dir` atomically (rename), as kubelet swaps a volume. */
async function installPair(dir: string, pair: { certPem: string; keyPem: string }) {
  await Deno.writeTextFile(`${dir}/tls.crt.tmp`, pair.certPem);
  await Deno.writeTextFile(`${dir}/tls.key.tmp`, pair.keyPem);
  await Deno.rename(`${dir}/tls.key.tmp`, `${dir}/tls.key`);
  await Deno.rename(`${dir}/tls.crt.tmp`, `${dir}/tls.crt`);
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};

/** TokenReviews and SubjectAccessReviews the operator's review client made in [from, to). */
async function reviewsBetween(fromMs: number, toMs: number) {
  const events = (await auditEvents(fromMs)).filter((e) =>
    e.userAgent?.endsWith("metrics-auth") && Date.parse(e.stageTimestamp) < toMs
  );
  const count = (resource: string) =>
    events.filter((e) => e.verb === "create" && e.objectRef?.resource === resource).length;
  return {
    tokenReviews: count("tokenreviews"),
    subjectAccessReviews: count("subjectaccessreviews"),
    total: events.length,
  };
}

Deno.test("secure /metrics: TokenReview and SubjectAccessReview per scrape", async (t) => {
  await installCrd();
  const c = await admin();
  const info = await cluster();
  const ns = await newNamespace("metrics");
  const cold = Array.from({ length: 8 }, (_, i) => `cold-${i}`);
  await createServiceAccounts(ns, ["reader", "nobody", "bound", ...cold]);
  const unbind = await bindMetricsReader(`e2e-${ns}`, ns, ["reader", "bound", ...cold]);
  const ops: Operator[] = [];
  const clients: Deno.HttpClient[] = [];
  try {
    const secure = await startOperator(["--metrics-secure"]);
    ops.push(secure);
    const plain = await startOperator([]); // the harness's default: --metrics-secure=false
    ops.push(plain);
    await Promise.all([secure.waitReady(), plain.waitReady()]);
    const url = `https://127.0.0.1:${secure.metricsPort}/metrics`;
    const ca = await servedCertificate(secure.metricsPort);
    // HTTP/1.1 as Prometheus scrapes (Deno's client stalls ~40 ms on some HTTP/2 answers; see
    // lib/kube/credentials.ts), so the latency below is the server's, not the client's.
    const tls = Deno.createHttpClient({ caCerts: [ca], http1: true, http2: false });
    clients.push(tls);
    const readerToken = await mintToken(c, ns, "reader", 3600);
    const outcome = (what: string, r: { status: number }) =>
      console.log(`  GET ${url} ${what} -> ${r.status}`);

    await t.step("anonymous: 401, no detail", async () => {
      const r = await scrape(url, tls);
      outcome("(no token)", r);
      assertEquals([r.status, r.text], [401, "Unauthorized\n"]);
    });

    await t.step("a ServiceAccount without the role: 403, no detail", async () => {
      const r = await scrape(url, tls, await mintToken(c, ns, "nobody", 3600));
      outcome(`(token of ${ns}/nobody)`, r);
      assertEquals([r.status, r.text], [403, "Forbidden\n"]);
    });

    await t.step("bound to metrics-reader: 200 with controller-runtime's names", async () => {
      const r = await scrape(url, tls, readerToken);
      outcome(`(token of ${ns}/reader, bound to the metrics-reader ClusterRole)`, r);
      assertEquals(r.status, 200);
      for (const name of CONTROLLER_RUNTIME_NAMES) {
        assert(r.text.includes(`# TYPE ${name} `), `${name} missing`);
      }
    });

    await t.step("rejected tokens: expired, foreign key, bound Secret deleted → 401", async () => {
      // Expired: the reader's own token, exp moved 5 min into the past (beyond the 1 min leeway
      // of the apiserver's JWT check), signed with the cluster's real ServiceAccount key.
      const saKey = await crypto.subtle.importKey(
        "pkcs8",
        pemDer(await Deno.readTextFile(info.saKeyFile)),
        RS256,
        false,
        ["sign"],
      );
      const now = Math.floor(Date.now() / 1000);
      const fresh = await mintToken(c, ns, "reader", 3600);
      const expired = await resign(fresh, saKey, (cl) => {
        cl.iat = cl.nbf = now - 900;
        cl.exp = now - 300;
      });
      // Foreign key: the same valid claims signed by a key the apiserver does not know.
      const foreign = (await crypto.subtle.generateKey(
        { ...RS256, modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]) },
        false,
        ["sign", "verify"],
      )) as CryptoKeyPair;
      const forged = await resign(fresh, foreign.privateKey, () => {});
      // Bound to a Secret that is then deleted (TokenRequest boundObjectRef).
      const secret = await c.create<KubeObject>(SECRETS, {
        apiVersion: "v1",
        kind: "Secret",
        metadata: { name: "binding", namespace: ns },
      } as KubeObject);
      const tr = await c.create<KubeObject & { status?: { token?: string } }>(
        rt("v1", "TokenRequest", "serviceaccounts/bound/token", true),
        {
          apiVersion: "authentication.k8s.io/v1",
          kind: "TokenRequest",
          spec: {
            expirationSeconds: 3600,
            boundObjectRef: {
              apiVersion: "v1",
              kind: "Secret",
              name: "binding",
              uid: secret.metadata!.uid,
            },
          },
        } as KubeObject,
        { namespace: ns },
      );
      const orphaned = tr.status!.token!;
      await c.delete(SECRETS, "binding", { namespace: ns });
      // The operator must not see the token before the apiserver rejects it (a success would be
      // cached for a minute): ask the apiserver directly first.
      await waitFor("the apiserver rejects the token of the deleted Secret", async () => {
        const r = await c.create<KubeObject & { status?: { authenticated?: boolean } }>(
          TOKEN_REVIEWS,
          {
            apiVersion: "authentication.k8s.io/v1",
            kind: "TokenReview",
            spec: { token: orphaned },
          } as KubeObject,
        );
        return r.status?.authenticated !== true;
      }, 30_000);
      for (
        const [what, token] of [
          ["expired 5 min ago, signed with the cluster's key", expired],
          ["valid claims, signed with a foreign key", forged],
          ["bound to a deleted Secret", orphaned],
        ]
      ) {
        const r = await scrape(url, tls, token);
        outcome(`(token ${what})`, r);
        assertEquals([r.status, r.text], [401, "Unauthorized\n"], what);
      }
    });

    await t.step("added apiserver requests and latency per scrape (audit log)", async () => {
      const plainClient = Deno.createHttpClient({ http1: true, http2: false });
      clients.push(plainClient);
      const plainUrl = `http://127.0.0.1:${plain.metricsPort}/metrics`;
      const N = 30;
      // Warm the connections and the reader's cache entries first; then plain and HTTPS scrapes
      // alternate, so both see the same load of this shared machine.
      await scrape(plainUrl, plainClient);
      await scrape(url, tls, readerToken);
      const plainMs: number[] = [];
      const warmMs: number[] = [];
      const warmFrom = Date.now();
      for (let i = 0; i < N; i++) {
        plainMs.push((await scrape(plainUrl, plainClient)).ms);
        const r = await scrape(url, tls, readerToken);
        assertEquals(r.status, 200);
        warmMs.push(r.ms);
      }
      const warmTo = Date.now() + 1;

      // Cold: a user never seen (TokenReview + SubjectAccessReview) ...
      const coldTokens = await Promise.all(cold.map((sa) => mintToken(c, ns, sa, 3600)));
      // ... and a new token of a known user.
      const newTokens = await Promise.all(cold.map(() => mintToken(c, ns, "reader", 3600)));
      const scrapeEach = async (tokens: string[]) => {
        const ms: number[] = [];
        for (const token of tokens) {
          const r = await scrape(url, tls, token);
          assertEquals(r.status, 200);
          ms.push(r.ms);
        }
        return ms;
      };
      const coldFrom = Date.now();
      const coldMs = await scrapeEach(coldTokens);
      const coldTo = Date.now() + 1;
      const newTokenMs = await scrapeEach(newTokens);
      const newTo = Date.now() + 1;
      await new Promise((r) => setTimeout(r, 500)); // the audit log is written asynchronously

      const warm = await reviewsBetween(warmFrom, warmTo);
      const coldReviews = await reviewsBetween(coldFrom, coldTo);
      const newReviews = await reviewsBetween(coldTo, newTo);
      const fmt = (xs: number[]) => `${median(xs).toFixed(2)} ms`;
      const added = (xs: number[]) => {
        const d = median(xs) - median(plainMs);
        return `${d < 0 ? "−" : "+"}${Math.abs(d).toFixed(2)} ms`;
      };
      console.log(
        `  median of ${N} scrapes: plain HTTP ${fmt(plainMs)}; HTTPS warm cache ` +
          `${fmt(warmMs)} (${added(warmMs)}), ${warm.total} apiserver requests in ${N} scrapes`,
      );
      console.log(
        `  median of ${cold.length} scrapes, cold cache (new user): ${fmt(coldMs)} ` +
          `(${added(coldMs)}), ${coldReviews.tokenReviews} TokenReviews + ` +
          `${coldReviews.subjectAccessReviews} SubjectAccessReviews; new token of a known user: ` +
          `${fmt(newTokenMs)} (${added(newTokenMs)}), ${newReviews.tokenReviews} TokenReviews + ` +
          `${newReviews.subjectAccessReviews} SubjectAccessReviews`,
      );
      assertEquals(warm.total, 0, "a warm scrape asks the apiserver nothing");
      assertEquals(coldReviews, {
        tokenReviews: cold.length,
        subjectAccessReviews: cold.length,
        total: 2 * cold.length,
      });
      // A new token of a known user is a new review of both kinds: its user info carries the
      // token's credential id (extra authentication.kubernetes.io/credential-id), part of the
      // access review's key as in k8s.io/apiserver's webhook authorizer.
      assertEquals(newReviews, coldReviews);
    });

    await t.step("plain mode (--metrics-secure=false) answers as before, no token", async () => {
      const client = Deno.createHttpClient({});
      clients.push(client);
      const r = await scrape(`http://127.0.0.1:${plain.metricsPort}/metrics`, client);
      console.log(`  GET http://127.0.0.1:${plain.metricsPort}/metrics (no token) -> ${r.status}`);
      assertEquals(r.status, 200);
      assert(r.text.includes("# TYPE controller_runtime_reconcile_total counter"));
    });
  } finally {
    for (const op of ops.splice(0)) await op.stop();
    for (const cl of clients.splice(0)) cl.close();
    await unbind();
    await dropNamespace(ns);
  }
});

Deno.test("secure /metrics: the leader and the standby both answer scrapes", async () => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("metrics-ha");
  await createServiceAccounts(ns, ["reader"]);
  const unbind = await bindMetricsReader(`e2e-${ns}`, ns, ["reader"]);
  const lease = `e2e-metrics-${crypto.randomUUID().slice(0, 6)}`;
  const args = [
    "--metrics-secure",
    "--leader-elect",
    `--leader-election-namespace=${ns}`,
    `--leader-election-id=${lease}`,
  ];
  const ops: Operator[] = [];
  const clients: Deno.HttpClient[] = [];
  try {
    ops.push(await startOperator(args), await startOperator(args));
    await Promise.all(ops.map((op) => op.waitReady()));
    const token = await mintToken(c, ns, "reader", 3600);
    const status = async (op: Operator) => {
      const cl = Deno.createHttpClient({ caCerts: [await servedCertificate(op.metricsPort)] });
      clients.push(cl);
      const r = await scrape(`https://127.0.0.1:${op.metricsPort}/metrics`, cl, token);
      const leading = new RegExp(`^leader_election_master_status\\{name="${lease}"\\} 1$`, "m");
      return { status: r.status, leading: leading.test(r.text) };
    };
    // Once one replica leads, both still answer: the reviews are not the leader's writes.
    const seen = await waitFor(
      "one replica leading, both answering",
      async () => {
        const s = await Promise.all(ops.map(status));
        return s.filter((x) => x.leading).length === 1 ? s : undefined;
      },
      60_000,
      500,
    );
    assertEquals(seen.map((x) => x.status), [200, 200]);
  } finally {
    for (const op of ops) await op.stop();
    for (const cl of clients) cl.close();
    await unbind();
    await dropNamespace(ns);
  }
});

Deno.test("secure /metrics: an operator that may not create TokenReviews answers 500, logs why", async () => {
  const c = await admin();
  const ns = await newNamespace("metrics-norbac");
  await createServiceAccounts(ns, ["operator", "reader"]);
  const unbind = await bindMetricsReader(`e2e-${ns}`, ns, ["reader"]);
  const dir = await Deno.makeTempDir({ prefix: "metrics-norbac-" });
  // An operator running as a ServiceAccount with no permission at all: never ready, but its
  // /metrics listens (on every replica, ready or not) and cannot ask the apiserver.
  const info = await cluster();
  const kubeconfig = `${dir}/kubeconfig`;
  const token = await mintToken(c, ns, "operator", 3600);
  await writeTokenKubeconfig(kubeconfig, info.server, info.caCertFile, token, ns);
  const op = await startOperator([`--kubeconfig=${kubeconfig}`, "--metrics-secure"]);
  let tls: Deno.HttpClient | undefined;
  try {
    const ca = await waitFor(
      "the HTTPS port",
      () => servedCertificate(op.metricsPort),
      60_000,
      250,
    );
    tls = Deno.createHttpClient({ caCerts: [ca] });
    const r = await scrape(
      `https://127.0.0.1:${op.metricsPort}/metrics`,
      tls,
      await mintToken(c, ns, "reader", 3600),
    );
    console.log(
      `  GET https://127.0.0.1:${op.metricsPort}/metrics (reader's token) -> ${r.status}`,
    );
    assertEquals([r.status, r.text], [500, "Internal Server Error\n"]);
    const logged = await waitFor(
      "the reason in the log",
      () => op.logs().find((l) => l.message === "Cannot check a metrics request"),
      10_000,
      100,
    );
    const props = logged.properties as Record<string, unknown>;
    assertEquals([props.review, props.status], ["TokenReview", 500]);
    assert(/403/.test(String(props.error)), String(props.error));
  } finally {
    tls?.close();
    await op.stop();
    await unbind();
    await dropNamespace(ns);
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("secure /metrics: --metrics-cert-dir rotation picked up without a restart", async (t) => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("metrics-cert");
  await createServiceAccounts(ns, ["reader"]);
  const unbind = await bindMetricsReader(`e2e-${ns}`, ns, ["reader"]);
  const dir = await Deno.makeTempDir({ prefix: "metrics-cert-dir-" });
  const certs = `${dir}/certs`;
  await Deno.mkdir(certs);
  const clients: Deno.HttpClient[] = [];
  let op: Operator | undefined;
  try {
    const ca = await opensslCa(dir);
    const a = await opensslCertificate(dir, "a");
    const b = await opensslCertificate(dir, "b");
    await installPair(certs, a);
    op = await startOperator(["--metrics-secure", `--metrics-cert-dir=${certs}`]);
    await op.waitReady();
    const url = `https://127.0.0.1:${op.metricsPort}/metrics`;
    const token = await mintToken(c, ns, "reader", 3600);
    const trustCa = Deno.createHttpClient({ caCerts: [ca] });
    clients.push(trustCa);

    await t.step("the certificate from the folder is served", async () => {
      assertEquals(await servedCertificate(op!.metricsPort), a.certPem);
      assertEquals((await scrape(url, trustCa, token)).status, 200);
    });

    await t.step("a new pair is served within seconds, same process, same port", async () => {
      const pid = op!.child.pid;
      const t0 = performance.now();
      await installPair(certs, b);
      await waitFor(
        "the new certificate served",
        async () => (await servedCertificate(op!.metricsPort)) === b.certPem,
        30_000,
        250,
      );
      console.log(
        `  new tls.crt/tls.key served ${(performance.now() - t0).toFixed(0)} ms after the swap`,
      );
      // A new connection verifies against the CA and is let through as before.
      const fresh = Deno.createHttpClient({ caCerts: [ca] });
      clients.push(fresh);
      const after = await scrape(url, fresh, token);
      assertEquals(after.status, 200);
      // controller-runtime's certwatcher counters: the read at start and the reload checks since.
      assert(metricSum(after.text, "certwatcher_read_certificate_total") >= 2, after.text);
      assertEquals(metricSum(after.text, "certwatcher_read_certificate_errors_total"), 0);
      assertEquals(op!.child.pid, pid);
      assert(
        op!.logs().some((l) => l.message === "Reloaded the metrics serving certificate"),
        "reload logged",
      );
    });
  } finally {
    if (op) assertEquals(await op.stop(), 0);
    for (const cl of clients) cl.close();
    await unbind();
    await dropNamespace(ns);
    await Deno.remove(dir, { recursive: true });
  }

  await t.step("a cert dir without tls.crt: exit 1 with one line", async () => {
    const empty = await Deno.makeTempDir({ prefix: "metrics-cert-empty-" });
    try {
      const bad = await startOperator(["--metrics-secure", `--metrics-cert-dir=${empty}`]);
      const status = await bad.status;
      assertEquals(status.code, 1);
      const last = bad.stderr().trim().split("\n").pop() ?? "";
      assert(/^error: cannot read .*tls\.crt/.test(last), last);
    } finally {
      await Deno.remove(empty, { recursive: true });
    }
  });
});

Deno.test("deploy/: metrics Service, metrics-reader ClusterRole, NetworkPolicy pass validation", async () => {
  const c = await admin();
  const read = async (f: string) => parseYaml(await Deno.readTextFile(`${REPO}/deploy/${f}`));
  const namespace = await read("namespace.yaml") as KubeObject;
  // The namespace for real (as the RBAC test applies it), the rest as a server-side dry run.
  await c.patch(NAMESPACES, namespace.metadata!.name!, namespace, {
    type: "apply",
    fieldManager: "appservice-e2e",
    force: true,
  });
  const objects: [string, ResourceType][] = [
    ["service.yaml", SERVICES],
    ["metrics_reader_role.yaml", CLUSTER_ROLES],
    ["network_policy.yaml", NETWORK_POLICIES],
  ];
  for (const [file, type] of objects) {
    // Under another name, so nothing another test uses is touched.
    const o = await read(file) as KubeObject;
    const name = `${o.metadata!.name}-e2e-dry-run`;
    const created = await c.create(type, { ...o, metadata: { ...o.metadata, name } }, {
      dryRun: true,
    });
    assertEquals(created.metadata?.name, name, file);
  }
});
