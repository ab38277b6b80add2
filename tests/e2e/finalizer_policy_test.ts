/**
 * Issue 27 (1): deploy/finalizer_policy.yaml, the MutatingAdmissionPolicy that adds the
 * operator's finalizer at create. A delete right after a create, before the operator saw the
 * AppService, still runs the cleanup; with the policy the operator makes no finalizer patch.
 *
 * Each test, in its own namespace (the tests' binding leaves out namespaces labelled off,
 * tests/cluster/finalizer_policy.ts), with and without the policy:
 * 1. operator stopped: `early` created and deleted at once; `live` created and left;
 * 2. operator started: `early` goes away, `live` becomes Ready (Pods, Service);
 * 3. `live` deleted: when it is gone, its Pods and Service are gone (the cleanup ran before the
 *    finalizer was removed; the garbage collector would remove them only afterwards);
 * 4. with the policy, `quick` created and deleted back to back with the operator running: it goes
 *    away and leaves no Pod or Service behind; without it, rounds of that until kube-apiserver's
 *    delete/finalizer race (kubernetes/kubernetes#77988) removed one with its Pods present twice;
 *    the operator swept each such AppService's objects (its warning line names it;
 *    docs/design/finalizer.md "Gone without the cleanup"), nothing of any round left after;
 * 5. the audit log: the operator's patches of AppServices (not status) received before each
 *    delete, i.e. finalizer adds: none with the policy; one for `live` without (the positive
 *    control of the first).
 */
import type { Pod, Service } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { PODS, SERVICES } from "../../lib/kube/resources.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { type AppService, APPSERVICES, FINALIZER } from "../../lib/appservice/schema.ts";
import { FINALIZER_POLICY_NAME } from "../../lib/appservice/policy.ts";
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
import { type AuditEvent, auditEvents, describe, receivedMs } from "./audit.ts";

const AS = APPSERVICES as never;
const SPEC = { image: "nginx:1.27", replicas: 2, ports: [{ containerPort: 80 }] };

/** Whether AppService `ns/name` is gone (404). */
async function gone(ns: string, name: string): Promise<boolean> {
  try {
    await getAs(ns, name);
    return false;
  } catch (err) {
    if (isNotFound(err)) return true;
    throw err;
  }
}

/** Pods and Service of AppService `name` in `ns` (by the operator's instance label and name). */
async function owned(ns: string, name: string): Promise<string[]> {
  const c = await admin();
  const pods = await c.list<Pod>(PODS, {
    namespace: ns,
    labelSelector: `app.kubernetes.io/instance=${name}`,
  });
  const out = pods.items.map((p) => `Pod ${p.metadata?.name}`);
  try {
    await c.get<Service>(SERVICES, name, { namespace: ns });
    out.push(`Service ${name}`);
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  return out;
}

/** The operator's patches of AppService `name` itself (not its status) received before `beforeMs`. */
function finalizerAdds(events: AuditEvent[], ns: string, name: string, beforeMs: number) {
  return events.filter((e) =>
    e.verb === "patch" && e.objectRef?.resource === "appservices" &&
    !e.objectRef.subresource && e.objectRef.namespace === ns && e.objectRef.name === name &&
    receivedMs(e) < beforeMs
  );
}

for (const withPolicy of [true, false]) {
  const label = withPolicy ? "with" : "without";
  Deno.test(`finalizer policy: a delete right after a create runs the cleanup, ${label} the policy`, async (t) => {
    await installCrd();
    const c = await admin();
    const ns = await newNamespace(`fpol-${label}`, { finalizerPolicy: withPolicy });
    const since = Date.now();
    let op: Awaited<ReturnType<typeof startOperator>> | undefined;
    try {
      await t.step("operator stopped: create and delete at once", async () => {
        const created = await c.create<AppService>(AS, appService(ns, "early", SPEC));
        assertEquals(
          created.metadata.finalizers?.includes(FINALIZER) ?? false,
          withPolicy,
          `finalizers in the create's answer: ${JSON.stringify(created.metadata.finalizers)}`,
        );
        await c.delete(AS, "early", { namespace: ns });
        if (withPolicy) {
          // Held by the finalizer until the operator's cleanup runs.
          const held = await getAs(ns, "early");
          assert(held.metadata.deletionTimestamp, "early: no deletionTimestamp");
          assert(held.metadata.finalizers?.includes(FINALIZER), "early: finalizer missing");
        } else {
          // Nothing holds it: gone at once; the operator never saw it and created nothing.
          assert(await gone(ns, "early"), "early still there without a finalizer");
        }
        await c.create(AS, appService(ns, "live", SPEC));
      });

      op = await startOperator();
      await op.waitReady();

      await t.step("start-up says whether the policy is in force (one line)", async () => {
        const of = () => op!.logs().filter((l) => l.message === "Finalizer admission policy");
        // Logged beside the informers' start: it may come just after /readyz.
        await waitFor("the start-up line on the policy", () => of().length > 0, 20_000);
        const lines = of();
        assertEquals(lines.length, 1, JSON.stringify(lines));
        const p = lines[0].properties as Record<string, unknown>;
        assertEquals(p.policy, FINALIZER_POLICY_NAME);
        // The tests' binding has a namespaceSelector: in force where bound.
        assertEquals([p.inForce, p.scoped], ["yes", true], JSON.stringify(p));
      });

      await t.step("operator running: early goes away, live becomes Ready", async () => {
        await waitFor("early gone", () => gone(ns, "early"), 60_000);
        assertEquals(await owned(ns, "early"), []);
        await waitFor("live Ready with 2 Pods and a Service", async () => {
          const a = await getAs(ns, "live");
          return a.status?.ready === true && a.status.readyReplicas === 2 &&
            (await owned(ns, "live")).length === 3;
        }, 60_000);
      });

      const liveDeleteMs = Date.now();
      await t.step("live deleted: its Pods and Service are gone when it is", async () => {
        await c.delete(AS, "live", { namespace: ns });
        await waitFor("live gone", () => gone(ns, "live"), 60_000, 50);
        assertEquals(await owned(ns, "live"), []);
      });

      let quickDeleteMs = 0;
      await t.step(
        withPolicy
          ? "create and delete back to back with the operator running"
          : "create and delete back to back: an AppService the apiserver's race removed is " +
            "swept by the operator",
        async () => {
          quickDeleteMs = Date.now();
          if (withPolicy) {
            await c.create(AS, appService(ns, "quick", SPEC));
            await c.delete(AS, "quick", { namespace: ns });
            await waitFor("quick gone", () => gone(ns, "quick"), 60_000, 50);
            // The finalizer came with the create: the cleanup ran before the object went.
            assertEquals(await owned(ns, "quick"), []);
            // The operator has caught up with the delete: still nothing of quick.
            await sleep(2_000);
            assertEquals(await owned(ns, "quick"), []);
            return;
          }
          // Without the policy the operator's finalizer patch races the delete, and kube-apiserver
          // can answer the patch 200 and still remove the object (kubernetes/kubernetes#77988;
          // docs/design/finalizer.md): its Pods exist when it is gone. Rounds until that was seen
          // twice (about 1 in 8 rounds here), at most 40.
          const racedPods: string[] = [];
          const racedNames: string[] = [];
          let raced = 0;
          let rounds = 0;
          for (; rounds < 40 && raced < 2; rounds++) {
            const name = `quick-${rounds}`;
            await c.create(AS, appService(ns, name, SPEC));
            await c.delete(AS, name, { namespace: ns });
            await waitFor(`${name} gone`, () => gone(ns, name), 60_000, 20);
            const left = await owned(ns, name);
            const pods = left.filter((x) => x.startsWith("Pod ")).map((x) => x.slice(4));
            if (pods.length > 0) {
              raced++;
              racedNames.push(name);
              racedPods.push(...pods);
            }
            await waitFor(
              `nothing of ${name} left`,
              async () => (await owned(ns, name)).length === 0,
              30_000,
            );
          }
          console.log(`${rounds} rounds; gone with Pods left ${raced} times: ${racedPods}`);
          if (raced === 0) return; // the race did not happen: nothing more to show this run
          // The operator's sweep ran for each (its warning line names the AppService), whoever
          // deleted the Pods first: the sweep (its DELETE in the audit log) or the garbage
          // collector (the sweep then finds them being deleted). Without the sweep no such line
          // exists and this fails.
          const swept = () =>
            new Set(
              op!.logs().filter((l) =>
                String(l.message).startsWith("AppService gone without its cleanup")
              ).map((l) => (l.properties as Record<string, unknown>)?.name),
            );
          await waitFor(
            `the sweep of ${racedNames} (swept: ${[...swept()]})`,
            () => racedNames.every((n) => swept().has(n)),
            10_000,
          );
          const deletes = (await auditEvents(quickDeleteMs)).filter((e) =>
            e.verb === "delete" && e.objectRef?.resource === "pods" &&
            e.objectRef.namespace === ns
          );
          const byOperator = racedPods.filter((p) =>
            deletes.some((e) => e.objectRef?.name === p && e.responseStatus?.code === 200)
          );
          console.log(`deleted by the operator's sweep: ${byOperator} (the rest by the GC)`);
        },
      );

      await t.step(
        withPolicy
          ? "audit: no finalizer patch (the apiserver added it)"
          : "audit: the operator added the finalizer to live (one patch)",
        async () => {
          const events = await auditEvents(since);
          const adds = [
            ...finalizerAdds(events, ns, "live", liveDeleteMs),
            ...finalizerAdds(events, ns, "quick", quickDeleteMs),
          ];
          const liveAdds = finalizerAdds(events, ns, "live", liveDeleteMs);
          if (withPolicy) {
            assertEquals(adds, [], `finalizer patches:\n${describe(adds)}`);
            // The removal after the cleanup is a patch too, and is seen (the filter sees patches).
            const all = events.filter((e) =>
              e.verb === "patch" && e.objectRef?.resource === "appservices" &&
              !e.objectRef.subresource && e.objectRef.namespace === ns
            );
            assert(
              all.some((e) => e.objectRef?.name === "live"),
              `no finalizer removal of live seen:\n${describe(all)}`,
            );
          } else {
            assertEquals(liveAdds.length, 1, `finalizer patches of live:\n${describe(liveAdds)}`);
            // Either order is right: a finalizer added before the delete (then the cleanup
            // removed it), or a delete first (the add is refused, nothing was created).
            const quick = events.filter((e) =>
              e.verb === "patch" && e.objectRef?.resource === "appservices" &&
              !e.objectRef.subresource && e.objectRef.namespace === ns &&
              e.objectRef.name === "quick"
            );
            console.log(`quick without the policy, the operator's patches:\n${describe(quick)}`);
          }
        },
      );
    } finally {
      if (op) assertEquals(await op.stop(), 0);
      await dropNamespace(ns);
    }
  });
}
