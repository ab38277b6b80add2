/**
 * Objects the operator owns or writes beside its Pods, in the states users put them in:
 *
 * - An admission refusal in a language other than English: the Warning Event that S19 promises
 *   is recorded (events.k8s.io limits `note` to 1,024 bytes, not characters).
 * - An owned Pod whose `managed-by` label was removed while the operator was not running (the
 *   operator's Pod cache selects on it): a scale-down still removes it, and a delete's cleanup
 *   deletes it before the finalizer goes (S6: the finalizer stays until owned objects are gone).
 * - A PodDisruptionBudget of the AppService's name made by someone else is never taken over or
 *   deleted (`Degraded` `PodDisruptionBudgetNameConflict`, as for the Service, S20's kind), and
 *   a PodDisruptionBudget write refused by an admission policy is retried slowly (S19).
 *
 * @module
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import { EVENTS, PODDISRUPTIONBUDGETS, PODS, type ResourceType } from "../../lib/kube/resources.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  admin,
  appService,
  dropNamespace,
  getAs,
  installCrd,
  newNamespace,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";
import { auditEvents, describe } from "./audit.ts";
import { denyPolicy, dryRunRefused, podRefused } from "./resources.ts";

const AS = APPSERVICES as unknown as ResourceType;

interface Ev extends KubeObject {
  type?: string;
  reason?: string;
  note?: string;
  regarding?: { kind?: string; name?: string };
}

/** Someone else's PodDisruptionBudget `web` in `ns`, for Pods labelled `app: legacy-web`. */
async function foreignPdb(
  c: KubeClient,
  ns: string,
  budget: { maxUnavailable: number } | { minAvailable: number },
): Promise<void> {
  await c.create(PODDISRUPTIONBUDGETS, {
    apiVersion: "policy/v1",
    kind: "PodDisruptionBudget",
    metadata: { name: "web", namespace: ns, labels: { team: "platform" } },
    spec: { ...budget, selector: { matchLabels: { app: "legacy-web" } } },
  } as KubeObject);
}

async function podsOf(c: KubeClient, ns: string, name: string): Promise<Pod[]> {
  const l = await c.list<Pod>(PODS, { namespace: ns });
  return l.items.filter((p) => new RegExp(`^${name}-[0-9]+$`).test(p.metadata!.name!));
}

Deno.test("owned objects: a non-ASCII admission refusal still yields its Warning Event (S19 kind)", async () => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("own-note");
  // 400 characters of 3 bytes each: 1200 bytes of message, well under 1024 characters.
  const localized = "社内レジストリのイメージのみ許可されています".repeat(20).slice(0, 400);
  const remove = await denyPolicy(c, `e2e-brk-note-${ns}`, ns, {
    resource: "pods",
    operations: ["CREATE"],
    expression: "!object.spec.containers.exists(c, c.image.endsWith(':9.9'))",
    message: localized,
  });
  const op = await startOperator();
  try {
    await podRefused(c, ns, "nginx:9.9");
    await op.waitReady();
    await c.create(AS, appService(ns, "web", { image: "nginx:9.9", replicas: 1 }));
    const degraded = await waitFor("Degraded PodCreateRejected", async () => {
      const a = await getAs(ns, "web");
      const d = a.status?.conditions?.find((x) => x.type === "Degraded");
      return d?.reason === "PodCreateRejected" ? d : undefined;
    }, 30_000);
    console.log("Degraded message length (chars):", degraded.message?.length);
    // Give the recorder time to write (Events are written asynchronously).
    await sleep(5_000);
    const evs = (await c.list<Ev>(EVENTS, { namespace: ns })).items.filter((e) =>
      e.regarding?.name === "web" && e.reason === "PodCreateRejected"
    );
    const refusedEventCreates = (await auditEvents(Date.now() - 120_000)).filter((e) =>
      e.objectRef?.resource === "events" && e.verb === "create" &&
      e.objectRef?.namespace === ns && (e.responseStatus?.code ?? 0) >= 400
    );
    console.log("refused Event creates:\n" + describe(refusedEventCreates));
    console.log(
      "operator log lines about events:\n" +
        op.stderr().split("\n").filter((l) => /event/i.test(l) && /fail|error|refus/i.test(l))
          .slice(0, 5).join("\n").slice(0, 3000),
    );
    for (const e of evs) console.log("event note bytes:", new TextEncoder().encode(e.note).length);
    assert(
      evs.length >= 1,
      `no PodCreateRejected Event recorded; ${refusedEventCreates.length} Event creates refused`,
    );
    assertEquals(refusedEventCreates.length, 0, "no Event create refused");
    const bytes = new TextEncoder().encode(evs[0].note ?? "").length;
    assert(bytes <= 1024 && bytes > 900, `note of ${bytes} bytes: cut at the limit`);
    assert(evs[0].note?.includes(localized.slice(0, 20)), "the note carries the refusal's text");
  } finally {
    await op.stop();
    await remove();
    await dropNamespace(ns);
  }
});

Deno.test("owned objects: an owned Pod that lost managed-by while the operator was down — scale-down and delete (S6 kind)", async (t) => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("own-lbl");
  let op = await startOperator();
  try {
    await op.waitReady();
    await c.create(AS, appService(ns, "web", { image: "nginx:1.27", replicas: 2 }));
    await c.create(AS, appService(ns, "del", { image: "nginx:1.27", replicas: 2 }));
    await waitFor("both Ready", async () =>
      (await getAs(ns, "web")).status?.ready === true &&
      (await getAs(ns, "del")).status?.ready === true);
    assertEquals(await op.stop(), 0);

    // While the operator is down: web-1 loses managed-by, web scales to 1; del-1 loses
    // managed-by, del is deleted.
    await c.patch(
      PODS,
      "web-1",
      { metadata: { labels: { "app.kubernetes.io/managed-by": null } } },
      {
        namespace: ns,
      },
    );
    await c.patch(AS, "web", { spec: { replicas: 1 } }, { namespace: ns });
    await c.patch(
      PODS,
      "del-1",
      { metadata: { labels: { "app.kubernetes.io/managed-by": null } } },
      {
        namespace: ns,
      },
    );
    await c.delete(AS, "del", { namespace: ns });
    const delUid = (await podsOf(c, ns, "del"))[0]?.metadata?.ownerReferences?.[0]?.uid;

    const since = Date.now();
    op = await startOperator();
    await op.waitReady();

    await t.step("delete: finalizer removed only after every owned Pod is gone", async () => {
      // Poll tightly: the moment the AppService is gone, is del-1 still there, not deleted by us?
      let podAtGone: Pod | undefined;
      for (let i = 0; i < 600; i++) {
        let gone = false;
        try {
          await getAs(ns, "del");
        } catch (err) {
          if (!isNotFound(err)) throw err;
          gone = true;
        }
        if (gone) {
          podAtGone = (await podsOf(c, ns, "del")).find((p) => p.metadata?.name === "del-1");
          break;
        }
        await sleep(50);
      }
      const opDeletes = (await auditEvents(since)).filter((e) =>
        e.verb === "delete" && e.objectRef?.resource === "pods" && e.objectRef?.namespace === ns
      );
      console.log("operator Pod deletes:\n" + describe(opDeletes));
      console.log(
        "del-1 when AppService gone:",
        podAtGone
          ? `exists, deletionTimestamp=${podAtGone.metadata?.deletionTimestamp}, owner=${
            podAtGone.metadata?.ownerReferences?.[0]?.uid === delUid
          }`
          : "absent",
      );
      const all = await auditEvents(since, "");
      const finalizerPatch = all.find((e) =>
        e.verb === "patch" && e.objectRef?.resource === "appservices" &&
        e.objectRef?.name === "del" && e.userAgent?.startsWith("appservice-operator/")
      );
      const del1 = all.filter((e) =>
        e.verb === "delete" && e.objectRef?.resource === "pods" && e.objectRef?.name === "del-1"
      );
      console.log(
        "operator's finalizer patch of del:",
        finalizerPatch?.requestReceivedTimestamp,
        finalizerPatch?.responseStatus?.code,
      );
      for (const e of del1) {
        console.log("delete pods/del-1 by", e.userAgent, "at", e.requestReceivedTimestamp);
      }
      assert(
        opDeletes.some((e) => e.objectRef?.name === "del-1"),
        "the operator never deleted its own Pod del-1; the finalizer went while it " +
          (podAtGone ? "still existed (left to the garbage collector)" : "was not deleted by it"),
      );
    });

    await t.step("scale-down: the owned Pod web-1 goes (no leak)", async () => {
      await waitFor("web Ready at 1", async () => {
        const a = await getAs(ns, "web");
        return a.status?.ready === true && a.status.observedGeneration === a.metadata.generation;
      }, 30_000);
      await sleep(15_000);
      const pods = (await podsOf(c, ns, "web")).filter((p) => !p.metadata?.deletionTimestamp);
      const a = await getAs(ns, "web");
      console.log(
        "web status:",
        a.status?.replicasSummary,
        "pods:",
        pods.map((p) =>
          `${p.metadata!.name} owner=${p.metadata?.ownerReferences?.[0]?.name} labels=${
            JSON.stringify(p.metadata?.labels)
          }`
        ).join("; "),
      );
      assertEquals(pods.map((p) => p.metadata!.name).sort(), ["web-0"], "leaked owned Pods");
    });
  } finally {
    await op.stop();
    await dropNamespace(ns);
  }
});

Deno.test("owned objects: a PodDisruptionBudget of the AppService's name made by someone else is not taken over (S20 kind)", async () => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("own-pdb");
  // The platform team's own budget for its own Pods, named like the app (a common convention).
  await foreignPdb(c, ns, { maxUnavailable: 1 });
  const op = await startOperator();
  try {
    await op.waitReady();
    await c.create(AS, appService(ns, "web", { image: "nginx:1.27", replicas: 2 }));
    await waitFor("web reconciled", async () => {
      const a = await getAs(ns, "web");
      return a.status?.observedGeneration === a.metadata.generation && a.status?.replicas === 2;
    }, 30_000);
    await sleep(5_000);
    const pdb = await c.get<KubeObject & { spec?: Record<string, unknown> }>(
      PODDISRUPTIONBUDGETS,
      "web",
      { namespace: ns },
    );
    const a = await getAs(ns, "web");
    console.log(
      "user PDB after the AppService:",
      JSON.stringify({
        labels: pdb.metadata?.labels,
        owners: pdb.metadata?.ownerReferences?.map((o) => `${o.kind}/${o.name}`),
        managers: pdb.metadata?.managedFields?.map((m) => `${m.manager}:${m.operation}`),
        spec: pdb.spec,
      }),
    );
    console.log(
      "AppService Degraded:",
      JSON.stringify(a.status?.conditions?.find((x) => x.type === "Degraded")),
    );
    const taken = (pdb.metadata?.ownerReferences ?? []).length > 0 ||
      JSON.stringify(pdb.spec?.selector) !== JSON.stringify({ matchLabels: { app: "legacy-web" } });
    await c.delete(AS, "web", { namespace: ns });
    await waitFor("web gone", async () => {
      try {
        await getAs(ns, "web");
        return false;
      } catch (err) {
        return isNotFound(err);
      }
    }, 30_000);
    await sleep(3_000);
    let survived = true;
    try {
      await c.get(PODDISRUPTIONBUDGETS, "web", { namespace: ns });
    } catch (err) {
      if (!isNotFound(err)) throw err;
      survived = false;
    }
    console.log("user PDB after the AppService was deleted:", survived ? "still there" : "DELETED");
    assert(!taken, "the operator took over (rewrote) a PodDisruptionBudget it did not create");
    assert(survived, "deleting the AppService deleted a PodDisruptionBudget it did not create");
    assertEquals(
      a.status?.conditions?.find((x) => x.type === "Degraded")?.reason,
      "PodDisruptionBudgetNameConflict",
    );
  } finally {
    await op.stop();
    await dropNamespace(ns);
  }
});

Deno.test("owned objects: a PodDisruptionBudget refused by an admission policy is retried slowly (S19 kind)", async () => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("own-pdbdeny");
  const remove = await denyPolicy(c, `e2e-pdb-deny-${ns}`, ns, {
    resource: "poddisruptionbudgets",
    apiGroup: "policy",
    operations: ["CREATE", "UPDATE"],
    expression: "false",
    message: "PDBs are managed by the platform team",
  });
  await dryRunRefused(c, "PDB policy in force", PODDISRUPTIONBUDGETS, {
    apiVersion: "policy/v1",
    kind: "PodDisruptionBudget",
    metadata: { generateName: "probe-", namespace: ns },
    spec: { maxUnavailable: 1, selector: { matchLabels: { a: "b" } } },
  } as KubeObject);
  const op = await startOperator();
  try {
    await op.waitReady();
    const since = Date.now();
    await c.create(AS, appService(ns, "web", { image: "nginx:1.27", replicas: 2 }));
    await sleep(60_000);
    const writes = (await auditEvents(since)).filter((e) =>
      e.objectRef?.namespace === ns && e.objectRef?.resource === "poddisruptionbudgets" &&
      e.verb !== "get" && e.verb !== "list" && e.verb !== "watch"
    );
    const a = await getAs(ns, "web");
    console.log("PDB write attempts in 60 s:", writes.length);
    console.log(describe(writes.slice(0, 30)));
    console.log(
      "status:",
      a.status?.replicasSummary,
      JSON.stringify(a.status?.conditions?.find((x) => x.type === "Degraded")),
    );
    const evs = (await c.list<Ev>(EVENTS, { namespace: ns })).items.filter((e) =>
      e.type === "Warning"
    );
    console.log(
      "warning events:",
      evs.map((e) => `${e.reason} x${(e as { series?: { count?: number } }).series?.count ?? 1}`)
        .join(", "),
    );
    // Positive control: the operator did try, and was refused.
    assert(writes.length >= 1, "no PodDisruptionBudget write attempted");
    assert(writes.every((e) => (e.responseStatus?.code ?? 0) >= 400), "a write went through");
    assert(
      writes.length <= 5,
      `${writes.length} refused PDB writes in the first minute (S19: at most 5)`,
    );
    assertEquals(
      a.status?.conditions?.find((x) => x.type === "Degraded")?.reason,
      "PodDisruptionBudgetRejected",
    );
    assert(
      evs.some((e) => e.reason === "PodDisruptionBudgetRejected"),
      "a Warning Event names the refusal",
    );
    assertEquals(a.status?.replicas, 2, "its Pods run meanwhile");
  } finally {
    await op.stop();
    await remove();
    await dropNamespace(ns);
  }
});

Deno.test("owned objects: a foreign minAvailable PodDisruptionBudget of the AppService's name", async () => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("own-pdbmin");
  await foreignPdb(c, ns, { minAvailable: 1 });
  const op = await startOperator();
  try {
    await op.waitReady();
    const since = Date.now();
    await c.create(AS, appService(ns, "web", { image: "nginx:1.27", replicas: 2 }));
    await sleep(20_000);
    const a = await getAs(ns, "web");
    const pdb = await c.get<KubeObject & { spec?: Record<string, unknown> }>(
      PODDISRUPTIONBUDGETS,
      "web",
      { namespace: ns },
    );
    const writes = (await auditEvents(since)).filter((e) =>
      e.objectRef?.namespace === ns && e.objectRef?.resource === "poddisruptionbudgets" &&
      e.verb === "patch"
    );
    console.log("PDB patches in 20 s:", writes.length, [
      ...new Set(writes.map((e) => e.responseStatus?.code)),
    ]);
    console.log(
      "Degraded:",
      JSON.stringify(a.status?.conditions?.find((x) => x.type === "Degraded")),
    );
    console.log(
      "PDB:",
      JSON.stringify({ owners: pdb.metadata?.ownerReferences?.length ?? 0, spec: pdb.spec }),
    );
    assertEquals(
      a.status?.conditions?.find((x) => x.type === "Degraded")?.reason,
      "PodDisruptionBudgetNameConflict",
      "no name-conflict condition for a PodDisruptionBudget the AppService does not own",
    );
    assertEquals(writes.length, 0, "no write to someone else's PodDisruptionBudget");
    assertEquals(pdb.metadata?.ownerReferences?.length ?? 0, 0);
  } finally {
    await op.stop();
    await dropNamespace(ns);
  }
});
