/**
 * S5 end to end: one AppService takes long to reconcile (an admission webhook served by this test
 * on 127.0.0.1 holds every Pod create in its namespace for a few seconds); another, created at the
 * same moment in another namespace, proceeds independently. The slow key is never reconciled twice
 * at once (no second create of the same Pod while the first is held), the adds that arrive while
 * it is busy merge, and the run that follows at once does not create again the Pods the previous
 * one created before the cache shows them (no AlreadyExists at all; docs/scenarios.md S24).
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import type { ResourceType } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import { PODS } from "../../lib/kube/resources.ts";
import {
  admin,
  appService,
  cluster,
  dropNamespace,
  getAs,
  installCrd,
  newNamespace,
  startOperator,
  waitFor,
} from "./harness.ts";
import { auditEvents, microTimeMs, receivedMs } from "./audit.ts";

const AS = APPSERVICES as unknown as ResourceType;
const HOLD_MS = 4_000;

async function openssl(args: string[]): Promise<void> {
  const out = await new Deno.Command("openssl", { args, stdout: "null", stderr: "piped" }).output();
  if (!out.success) throw new Error(`openssl ${args[0]}: ${new TextDecoder().decode(out.stderr)}`);
}

/** A serving certificate for 127.0.0.1 signed by the cluster CA, so the apiserver trusts it. */
async function servingCert(dir: string): Promise<{ cert: string; key: string; ca: string }> {
  const info = await cluster();
  await openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", `${dir}/wh.key`]);
  await openssl([
    "req",
    "-new",
    "-key",
    `${dir}/wh.key`,
    "-subj",
    "/CN=127.0.0.1",
    "-out",
    `${dir}/wh.csr`,
  ]);
  await Deno.writeTextFile(
    `${dir}/ext.cnf`,
    "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
  );
  await openssl([
    "x509",
    "-req",
    "-in",
    `${dir}/wh.csr`,
    "-CA",
    info.caCertFile,
    "-CAkey",
    info.caKeyFile,
    "-CAcreateserial",
    "-days",
    "1",
    "-extfile",
    `${dir}/ext.cnf`,
    "-out",
    `${dir}/wh.crt`,
  ]);
  return {
    cert: await Deno.readTextFile(`${dir}/wh.crt`),
    key: await Deno.readTextFile(`${dir}/wh.key`),
    ca: await Deno.readTextFile(info.caCertFile),
  };
}

Deno.test("S5: a slow reconcile does not hold up another; the slow key never runs twice at once", async (t) => {
  await installCrd();
  const c = await admin();
  const slowNs = await newNamespace("s5slow");
  const fastNs = await newNamespace("s5fast");
  const dir = await Deno.makeTempDir({ prefix: "s5-" });
  const { cert, key, ca } = await servingCert(dir);
  const server = new AbortController();
  let held = 0;
  const srv = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    cert,
    key,
    signal: server.signal,
    onListen: () => {},
  }, async (req) => {
    const review = await req.json();
    held++;
    await new Promise((r) => setTimeout(r, HOLD_MS));
    return Response.json({
      apiVersion: "admission.k8s.io/v1",
      kind: "AdmissionReview",
      response: { uid: review.request.uid, allowed: true },
    });
  });
  const webhook: ResourceType = {
    apiVersion: "admissionregistration.k8s.io/v1",
    kind: "ValidatingWebhookConfiguration",
    plural: "validatingwebhookconfigurations",
    namespaced: false,
  };
  const whName = `e2e-slow-${slowNs}`;
  await c.create(webhook, {
    apiVersion: "admissionregistration.k8s.io/v1",
    kind: "ValidatingWebhookConfiguration",
    metadata: { name: whName },
    webhooks: [{
      name: "slow.e2e.apps.our-org.com",
      clientConfig: { url: `https://127.0.0.1:${srv.addr.port}/`, caBundle: btoa(ca) },
      rules: [{
        apiGroups: [""],
        apiVersions: ["v1"],
        operations: ["CREATE"],
        resources: ["pods"],
      }],
      namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": slowNs } },
      admissionReviewVersions: ["v1"],
      sideEffects: "None",
      timeoutSeconds: 15,
      failurePolicy: "Fail",
    }],
  } as never);
  const op = await startOperator(["--max-concurrent-reconciles=2"]);
  try {
    await op.waitReady();
    // The webhook configuration takes effect within a moment; wait until a create is held.
    await waitFor(
      "webhook in force",
      async () => {
        const before = held;
        const p = await c.create<Pod>(PODS, {
          apiVersion: "v1",
          kind: "Pod",
          metadata: { generateName: "probe-", namespace: slowNs },
          spec: { containers: [{ name: "c", image: "busybox:1" }] },
        });
        await c.delete(PODS, p.metadata!.name!, { namespace: slowNs });
        return held > before;
      },
      30_000,
      500,
    );

    const since = Date.now();
    await t.step("the fast AppService is Ready while the slow one is still held", async () => {
      await c.create(AS, appService(slowNs, "slow", { image: "nginx:1.27", replicas: 3 }));
      await c.create(AS, appService(fastNs, "fast", { image: "nginx:1.27" }));
      // Repeated changes of the busy key while it is held: they merge into one more run.
      for (const image of ["nginx:1.28", "nginx:1.29", "nginx:1.30"]) {
        await c.patch(AS, "slow", { spec: { image } }, { namespace: slowNs });
      }
      await waitFor(
        "fast Ready",
        async () => (await getAs(fastNs, "fast")).status?.ready,
        30_000,
        100,
      );
      const slow = await getAs(slowNs, "slow");
      assert(!slow.status?.ready, "the slow AppService should still be held by the webhook");
    });

    await t.step("the slow one converges; its Pods were never created twice at once", async () => {
      await waitFor(
        "slow Ready at the last image",
        async () => {
          const a = await getAs(slowNs, "slow");
          return a.status?.ready && a.status.observedGeneration === a.metadata.generation;
        },
        120_000,
        500,
      );
      const creates = (await auditEvents(since)).filter((e) =>
        e.verb === "create" && e.objectRef?.resource === "pods" && e.objectRef?.namespace === slowNs
      );
      // Two creates of one Pod at once: the second arrived before the first was answered (each is
      // held HOLD_MS by the webhook, so two reconciles of the key at once would overlap).
      const overlapping = creates.filter((e) =>
        creates.some((f) =>
          f !== e && f.objectRef?.name === e.objectRef?.name &&
          receivedMs(f) <= receivedMs(e) && receivedMs(e) < microTimeMs(f.stageTimestamp)
        )
      );
      const told = creates.map((e) =>
        `${e.objectRef?.name} ${e.requestReceivedTimestamp} .. ${e.stageTimestamp} -> ${e.responseStatus?.code}`
      ).join("\n");
      assertEquals(overlapping, [], `concurrent creates of one Pod:\n${told}`);
      // Nor one after another on a cache that does not show the first yet (docs/scenarios.md
      // S24): the reconcile that follows its own creates sees them.
      const conflicts = creates.filter((e) => e.responseStatus?.code === 409);
      assertEquals(conflicts, [], `a Pod created again:\n${told}`);
      const pods = await c.list<Pod>(PODS, {
        namespace: slowNs,
        labelSelector: "app.kubernetes.io/instance=slow",
      });
      assertEquals(pods.items.length, 3);
      for (const p of pods.items) assertEquals(p.spec!.containers[0].image, "nginx:1.30");
    });
  } finally {
    await c.delete(webhook, whName).catch(() => {});
    const code = await op.stop();
    server.abort();
    await srv.finished;
    await dropNamespace(slowNs);
    await dropNamespace(fastNs);
    await Deno.remove(dir, { recursive: true });
    assertEquals(code, 0);
  }
});
