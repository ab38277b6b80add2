/**
 * S21 of docs/scenarios.md: the namespace of running AppServices is deleted. While the
 * namespace controller deletes their Pods, the operator must not fight it: after the first
 * "namespace is being terminated" answer (403 with a StatusCause of type NamespaceTerminating,
 * from the NamespaceLifecycle admission plugin) it creates nothing there, Events included. Counted
 * from the apiserver's audit log (refused writes per AppService) and the operator's own log
 * (error lines); the finalizers are still removed and the namespace goes away in bounded time.
 * A namespace of the same name made afterwards is served as usual.
 */
import { assert, assertEquals } from "../assert.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { NAMESPACES, type ResourceType } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  admin,
  appService,
  dropNamespace,
  getAs,
  installCrd,
  newNamespace,
  startOperator,
  waitFor,
} from "./harness.ts";
import { type AuditEvent, auditEvents, describe, WRITE_VERBS } from "./audit.ts";

const AS = APPSERVICES as unknown as ResourceType;
/** AppServices in the namespace, and Pods each. */
const APPS = 4;
const REPLICAS = 3;
/** The scenario's bounds (docs/scenarios.md S21). */
const MAX_REFUSED_PER_APPSERVICE = 3;
const MAX_ERROR_LINES = 10;
/** How long the namespace may take to go (bounded wait; measured figure logged). */
const NAMESPACE_GONE_WITHIN_MS = 60_000;

/** The AppService a write was made for: Pods `<as>-<n>`, Events `<as>.<hex>`, else the name. */
function appServiceOf(e: AuditEvent, names: string[]): string {
  const n = e.objectRef?.name ?? "";
  const byPrefix = names.find((a) => n === a || n.startsWith(`${a}-`) || n.startsWith(`${a}.`));
  return byPrefix ?? `(unnamed ${e.objectRef?.resource})`;
}

Deno.test("S21: deleting the namespace of running AppServices: nothing is created there after the first refusal", async () => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("s21");
  const names = Array.from({ length: APPS }, (_, i) => `app${i}`);
  const op = await startOperator();
  let deleted = false;
  try {
    await op.waitReady();
    for (const n of names) {
      await c.create(
        AS,
        appService(ns, n, {
          image: "nginx:1.27",
          replicas: REPLICAS,
          ports: [{ name: "http", containerPort: 80 }],
        }),
      );
    }
    await waitFor(`${APPS} AppServices Ready`, async () => {
      for (const n of names) {
        const a = await getAs(ns, n);
        if (!a.status?.ready || a.status.readyReplicas !== REPLICAS) return false;
      }
      return true;
    }, 90_000);

    const logsBefore = op.logs().length;
    const since = Date.now();
    await c.delete(NAMESPACES, ns);
    deleted = true;
    await waitFor(
      "the namespace gone",
      async () => {
        try {
          await c.get(NAMESPACES, ns);
          return false;
        } catch (err) {
          return isNotFound(err);
        }
      },
      NAMESPACE_GONE_WITHIN_MS,
      200,
    );
    const goneMs = Date.now() - since;

    const mine = (await auditEvents(since)).filter((e) =>
      e.objectRef?.namespace === ns && WRITE_VERBS.has(e.verb)
    );
    // A write the apiserver refused because of the namespace: 403 (being terminated), or 404 on
    // a create once it is gone.
    const refused = mine.filter((e) =>
      e.responseStatus?.code === 403 ||
      (e.responseStatus?.code === 404 && (e.verb === "create" || e.verb === "patch"))
    );
    const perApp = new Map<string, number>();
    for (const e of refused) {
      const a = appServiceOf(e, names);
      perApp.set(a, (perApp.get(a) ?? 0) + 1);
    }
    const errorLines = op.logs().slice(logsBefore).filter((l) => l.level === "ERROR");
    const errorKinds = new Map<string, number>();
    for (const l of errorLines) {
      const p = l.properties as Record<string, unknown> | undefined;
      const k = `${l.message}: ${String(p?.error ?? "").replace(/e2e-s21-[0-9a-f]+/g, "NS")}`
        .slice(0, 160);
      errorKinds.set(k, (errorKinds.get(k) ?? 0) + 1);
    }
    console.log(
      `S21: namespace gone after ${goneMs} ms; ${mine.length} writes by the operator, ` +
        `${refused.length} refused (${JSON.stringify(Object.fromEntries(perApp))}); ` +
        `${errorLines.length} error log lines`,
      ...[...errorKinds].map(([k, n]) => `\n  ${n} × ${k}`),
    );
    const worst = Math.max(0, ...perApp.values());
    assert(
      worst <= MAX_REFUSED_PER_APPSERVICE,
      `up to ${worst} refused writes for one AppService (at most ${MAX_REFUSED_PER_APPSERVICE}):\n${
        describe(refused)
      }`,
    );
    assert(
      errorLines.length <= MAX_ERROR_LINES,
      `${errorLines.length} error log lines (at most ${MAX_ERROR_LINES}):\n${
        errorLines.slice(0, 20).map((l) => JSON.stringify(l)).join("\n")
      }`,
    );

    // The same name again: a new namespace is served as usual (nothing remembered wrongly).
    await waitFor(
      "namespace created again",
      async () => {
        await c.create(NAMESPACES, { apiVersion: "v1", kind: "Namespace", metadata: { name: ns } });
        return true;
      },
      30_000,
      500,
    );
    deleted = false;
    await c.create(AS, appService(ns, "again", { image: "nginx:1.27", replicas: 2 }));
    const again = await waitFor("the new AppService Ready", async () => {
      const a = await getAs(ns, "again");
      return a.status?.ready && a.status.readyReplicas === 2 ? a : undefined;
    }, 30_000);
    assertEquals(again.status?.replicasSummary, "2/2");
  } finally {
    const code = await op.stop();
    if (!deleted) await dropNamespace(ns);
    assertEquals(code, 0, op.stderr().slice(-3000));
  }
});
