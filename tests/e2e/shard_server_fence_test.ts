/**
 * The server-side fence per shard end to end (issue 30; S23 with `--shards`): deploy/'s
 * shard_fence_policy.yaml (tests/e2e/lease_fence.ts `installShardFence`: deploy/'s CEL, the
 * test's names) refuses an operator write in a namespace unless it comes from the Pod that holds
 * the Lease of that namespace's shard. Two replicas of one ServiceAccount, told apart by the Pod
 * their bound tokens were issued for (tests/e2e/identity.ts), `--shards 4`, lease 4 s.
 *
 * Namespaces: two per shard (names chosen by the shard contract's FNV-1a) and one of 63 characters
 * (the longest a namespace can be: every step of the policy's unrolled hash runs), an AppService in
 * each.
 *
 * Asserted:
 * - with the policy in force, every AppService becomes Ready: each holder's writes are admitted in
 *   the namespaces of its shards (were the policy's CEL hash not the operator's, the holder of
 *   some namespace would be refused there);
 * - a dry-run Pod create with each replica's credentials in each namespace is admitted exactly
 *   where that replica holds the namespace's shard (the Leases say who), and refused elsewhere
 *   with the policy's `not the Lease holder` (a FencedError, reason NotLeaseHolder): both outcomes
 *   occur for each replica (the positive and negative controls of each other);
 * - after SIGKILL of replica b, once a holds all four shards, b's credentials are refused in every
 *   namespace (a write of the deposed holder that reaches the apiserver after the takeover) and a's
 *   admitted in every one.
 *
 * - back to one Lease (a's SIGTERM releases its shard Leases, then a replica without `--shards`):
 *   the leftover shard Leases are deleted and the single leader's writes admitted in every
 *   namespace.
 *
 * Printed, not asserted: the apiserver's time per check of this policy (its own histogram), in a
 * short namespace and in the longest.
 */
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { KubeClient, type KubeObject } from "../../lib/kube/client.ts";
import { loadClusterConfig } from "../../lib/kube/config.ts";
import { FencedError } from "../../lib/kube/errors.ts";
import { LEASES, NAMESPACES, PODS } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import { shardLeaseName } from "../../lib/runtime/shard_elector.ts";
import { shardOf } from "../../lib/runtime/shards.ts";
import { MAX_NAMESPACE_LENGTH } from "../../lib/runtime/shard_fence_cel.ts";
import {
  admin,
  apiserverMetrics,
  appService,
  dropNamespace,
  getAs,
  installCrd,
  newNamespace,
  type Operator,
  REPO,
  startOperator,
  waitFor,
} from "./harness.ts";
import { podBoundIdentities, type ReplicaIdentity } from "./identity.ts";
import { installShardFence } from "./lease_fence.ts";
import { applyDeployRbac } from "./resources.ts";
import { SHORT_LEASE_FLAGS } from "./lease_rounds.ts";
import { namespacesPerShard, podOfIdentity } from "./shard_audit.ts";

const SHARDS = 4;

/** A Pod to create with `dryRun=All`: admission runs (the policy too), nothing is stored. */
function probePod(ns: string): Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: "shard-fence-probe", namespace: ns },
    spec: { containers: [{ name: "c", image: "nginx:1.27" }] },
  };
}

/** The Pod name of each shard's holder (from the Leases), "" for a shard nobody holds. */
async function holders(c: KubeClient, ns: string, id: string): Promise<string[]> {
  const out: string[] = [];
  for (let k = 0; k < SHARDS; k++) {
    const l = await c.get<Lease>(LEASES, shardLeaseName(id, k), { namespace: ns }).catch(() =>
      undefined
    );
    const holder = l?.spec?.holderIdentity ?? "";
    out.push(holder.includes("_") ? podOfIdentity(holder) : "");
  }
  return out;
}

/**
 * Sum (s) and count of `apiserver_validating_admission_policy_check_duration_seconds` for the
 * policy `name`, over all its label sets.
 */
function policyChecks(metrics: string, name: string): { sum: number; count: number } {
  let sum = 0, count = 0;
  for (const line of metrics.split("\n")) {
    if (!line.includes(`policy="${name}"`)) continue;
    const value = Number(line.slice(line.lastIndexOf(" ") + 1));
    if (line.startsWith("apiserver_validating_admission_policy_check_duration_seconds_sum")) {
      sum += value;
    } else if (
      line.startsWith("apiserver_validating_admission_policy_check_duration_seconds_count")
    ) count += value;
  }
  return { sum, count };
}

/** Whether a dry-run Pod create as `who` in `ns` is admitted; throws anything but the policy's refusal. */
async function admitted(client: KubeClient, ns: string): Promise<boolean> {
  try {
    await client.create(PODS, probePod(ns), { dryRun: true, response: "none" });
    return true;
  } catch (err) {
    if (err instanceof FencedError && err.reason === "NotLeaseHolder") return false;
    throw err;
  }
}

Deno.test("sharding: the apiserver refuses a write unless its replica holds the namespace's shard (S23 per shard)", async (t) => {
  await installCrd();
  const c = await admin();
  const deployed = await applyDeployRbac(c, REPO);
  const leaseNs = await newNamespace("shfence-le");
  const tag = crypto.randomUUID().slice(0, 6);
  const electionId = `shfence-${tag}`;
  const dir = await Deno.makeTempDir({ prefix: "shfence-" });
  const { account, replicas: who } = await podBoundIdentities(
    deployed,
    leaseNs,
    "operator",
    ["replica-a", "replica-b"],
    dir,
  );
  const prefix = `e2e-shf-${tag}`;
  const longest = `${prefix}-${"x".repeat(MAX_NAMESPACE_LENGTH - prefix.length - 1)}`;
  const namespaces = [...namespacesPerShard(prefix, SHARDS, 2).flat(), longest];
  assertEquals(longest.length, MAX_NAMESPACE_LENGTH);
  const fence = await installShardFence(`shfence-${tag}`, account.user, leaseNs, electionId);
  const clients = who.map((w) => new KubeClient(loadClusterConfig({ kubeconfig: w.kubeconfig })));
  const ops = new Map<string, Operator>();
  const launch = async (w: ReplicaIdentity) => {
    const op = await startOperator([
      `--kubeconfig=${w.kubeconfig}`,
      "--leader-elect",
      `--leader-election-namespace=${leaseNs}`,
      `--leader-election-id=${electionId}`,
      `--shards=${SHARDS}`,
      `--watch-namespace=${namespaces.join(",")}`,
      ...SHORT_LEASE_FLAGS,
    ], { APPSERVICE_POD_NAME: w.podName });
    ops.set(w.podName, op);
    return op;
  };
  /** Admitted (true) or refused, per replica (as `who`) and namespace, with the holders then. */
  const judge = async () => {
    const held = await holders(c, leaseNs, electionId);
    const out: { ns: string; holder: string; admitted: boolean[] }[] = [];
    for (const ns of namespaces) {
      out.push({
        ns,
        holder: held[shardOf(ns, SHARDS)],
        admitted: await Promise.all(clients.map((cl) => admitted(cl, ns))),
      });
    }
    return { held, out };
  };
  try {
    for (const ns of namespaces) {
      await c.create(NAMESPACES, { metadata: { name: ns } } as KubeObject);
      await c.create(
        APPSERVICES as never,
        appService(ns, "app", { image: "nginx:1", replicas: 1 }),
        {
          namespace: ns,
        },
      );
    }

    await t.step("2 replicas, 2 shards each; every AppService Ready under the policy", async () => {
      for (const w of who) await launch(w);
      for (const op of ops.values()) await op.waitReady(90_000);
      await waitFor("2 shards each", async () => {
        const held = await holders(c, leaseNs, electionId);
        return who.every((w) => held.filter((h) => h === w.podName).length === 2);
      }, 60_000);
      for (const ns of namespaces) {
        await waitFor(`${ns} Ready`, async () => (await getAs(ns, "app")).status?.ready, 60_000);
      }
    });

    await t.step("each replica is admitted exactly in the namespaces of its shards", async () => {
      // Settled shares: judged twice, the holders read before each round must not move.
      const { held, out } = await judge();
      const lines = out.map((o) =>
        `${o.ns} (shard ${shardOf(o.ns, SHARDS)}, held by ${o.holder}): ${o.admitted}`
      );
      console.log(`holders ${held.join(", ")}\n${lines.join("\n")}`);
      assertEquals(await holders(c, leaseNs, electionId), held, "the shares moved meanwhile");
      for (const o of out) {
        for (const [i, w] of who.entries()) {
          assertEquals(
            o.admitted[i],
            o.holder === w.podName,
            `${w.podName} in ${o.ns}: ${lines.join("\n")}`,
          );
        }
      }
      for (const [i, w] of who.entries()) {
        assert(out.some((o) => o.admitted[i]), `${w.podName} admitted somewhere`);
        assert(out.some((o) => !o.admitted[i]), `${w.podName} refused somewhere`);
      }
    });

    await t.step(
      "after SIGKILL of b: a holds every shard; b is refused everywhere, a admitted",
      async () => {
        const b = ops.get(who[1].podName)!;
        b.child.kill("SIGKILL");
        await b.status;
        await waitFor("a holds all shards", async () => {
          const held = await holders(c, leaseNs, electionId);
          return held.every((h) => h === who[0].podName);
        }, 30_000);
        const { out } = await judge();
        for (const o of out) {
          assertEquals(o.admitted, [true, false], `${o.ns}: a then b`);
        }
        // a's writes go on in b's former shards: a change in each namespace is reconciled.
        for (const ns of namespaces) {
          await c.patch(APPSERVICES as never, "app", { spec: { progressDeadlineSeconds: 650 } }, {
            namespace: ns,
          });
        }
        for (const ns of namespaces) {
          await waitFor(`${ns} reconciled`, async () => {
            const as = await getAs(ns, "app");
            return as.status?.observedGeneration === as.metadata?.generation;
          }, 30_000);
        }
      },
    );

    await t.step(
      "the policy's time per judged write, measured (printed, not asserted)",
      async () => {
        // The apiserver's histogram of this policy observes refusals (an admission only when its
        // evaluation failed): b's writes, refused in every namespace now, give the time of one
        // Lease's evaluation, the namespace's hash included. Beside them, the client's time per
        // dry-run write: a's (admitted after an evaluation per shard Lease) and the admin's (not
        // matched by the policy).
        for (const ns of [namespaces[0], longest]) {
          const writes = 100;
          const before = policyChecks(await apiserverMetrics(), fence.name);
          for (let i = 0; i < writes; i++) assert(!(await admitted(clients[1], ns)));
          const after = policyChecks(await apiserverMetrics(), fence.name);
          const timed = async (fn: () => Promise<unknown>) => {
            const t0 = performance.now();
            for (let i = 0; i < writes; i++) await fn();
            return (performance.now() - t0) / writes;
          };
          const holderMs = await timed(() => admitted(clients[0], ns));
          const adminMs = await timed(() =>
            c.create(PODS, probePod(ns), { dryRun: true, response: "none" })
          );
          const checks = after.count - before.count;
          console.log(
            `namespace of ${ns.length} characters, ${SHARDS} shard Leases: ${
              ((after.sum - before.sum) * 1000 / Math.max(1, checks)).toFixed(3)
            } ms per Lease evaluation (${checks} refusals); per dry-run write at the client ` +
              `${holderMs.toFixed(1)} ms for the holder, ${adminMs.toFixed(1)} ms for the admin`,
          );
          assert(checks >= writes, `the histogram saw the refusals (${checks})`);
        }
      },
    );

    await t.step(
      "back to one Lease: the leftover shard Leases go, the leader's writes are admitted",
      async () => {
        // a gives its shards back on SIGTERM (released: no holder), which the policy would read as
        // refusing everyone in their ranges; a replica without --shards deletes them, then writes.
        const a = ops.get(who[0].podName)!;
        assertEquals(await a.stop(), 0);
        ops.delete(who[0].podName);
        const released = await holders(c, leaseNs, electionId);
        assertEquals(released, ["", "", "", ""], "a released its shards");
        const single = await startOperator([
          `--kubeconfig=${who[0].kubeconfig}`,
          "--leader-elect",
          `--leader-election-namespace=${leaseNs}`,
          `--leader-election-id=${electionId}`,
          `--watch-namespace=${namespaces.join(",")}`,
          ...SHORT_LEASE_FLAGS,
        ], { APPSERVICE_POD_NAME: who[0].podName });
        ops.set(who[0].podName, single);
        await single.waitReady(90_000);
        await waitFor("the shard Leases deleted", async () => {
          const left = await c.list<Lease>(LEASES, { namespace: leaseNs });
          return !left.items.some((l) => l.metadata?.name?.startsWith(`${electionId}-shard-`));
        }, 30_000);
        for (const ns of namespaces) {
          await c.patch(APPSERVICES as never, "app", { spec: { progressDeadlineSeconds: 660 } }, {
            namespace: ns,
          });
        }
        for (const ns of namespaces) {
          await waitFor(`${ns} reconciled by the single leader`, async () => {
            const as = await getAs(ns, "app");
            return as.status?.observedGeneration === as.metadata?.generation;
          }, 30_000);
        }
      },
    );
  } finally {
    for (const op of ops.values()) await op.stop().catch(() => {});
    for (const cl of clients) cl.close();
    await fence.cleanup();
    await account.cleanup();
    for (const ns of namespaces) await dropNamespace(ns).catch(() => {});
    await dropNamespace(leaseNs);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});
