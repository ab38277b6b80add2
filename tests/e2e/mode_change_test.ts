/**
 * A change of mode or of `--shards` with deploy/'s Lease-holder policies in force (S23 across
 * modes): the Leases of the old mode must neither block the new mode's writes nor leave namespaces
 * that nobody reconciles. Two replicas of one ServiceAccount with Pod-bound tokens
 * (tests/e2e/identity.ts), lease 4 s / renew 3 s / retry 1 s; each test changes every namespace's
 * AppService and waits until each is reconciled (observedGeneration), within 20 s.
 *
 * - **Shards → one Lease, overlapping** (a rolling change): b holds 4 shards; a starts without
 *   `--shards` and does not take the one Lease while b holds shards (b reconciles meanwhile);
 *   after b's SIGTERM a leads, reconciles, and the shard Leases are deleted.
 * - **One Lease → shards, overlapping**: a leads; b starts with `--shards 2` and takes no shard
 *   while a leads; after a's SIGTERM b takes both, deletes the released one Lease, reconciles.
 * - **A Lease of the other mode released after a takeover** (both modes' first attempts at once,
 *   which no rule can order): a released shard Lease with a range over every namespace appears
 *   after a's bounded sweep; a's refused write has it deleted (lib/runtime/fence_repair.ts) and
 *   every key reconciled.
 * - **A rolling change of `--shards`** (4 → 2): the new count takes no shard while the old count
 *   holds them, the old count keeps all four; after the old replica's SIGTERM the new one holds
 *   its two and the Leases beyond them are deleted.
 *
 * On the code before (fence_repair.ts and the rules of one mode and one count at a time) each of
 * these fails: a change not reconciled within 20 s, or "a keeps all four shards".
 */
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { LEASES, NAMESPACES } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import { memberLabelValue, shardLeaseName } from "../../lib/runtime/shard_elector.ts";
import { SHARD_LEASE_LABEL, shardLeaseMetadata } from "../../lib/runtime/shard_fence_cel.ts";
import {
  admin,
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
import { type InstalledLeaseFence, installLeaseFence, installShardFence } from "./lease_fence.ts";
import { applyDeployRbac } from "./resources.ts";
import { SHORT_LEASE_FLAGS } from "./lease_rounds.ts";
import { namespacesPerShard } from "./shard_audit.ts";

/** What each test sets up: identities, the policies, namespaces with one AppService each. */
interface Setup {
  c: KubeClient;
  leaseNs: string;
  electionId: string;
  who: ReplicaIdentity[];
  namespaces: string[];
  common: string[];
  cleanup(): Promise<void>;
}

async function setup(prefix: string, shards: number): Promise<Setup> {
  await installCrd();
  const c = await admin();
  const deployed = await applyDeployRbac(c, REPO);
  const leaseNs = await newNamespace(`${prefix}-le`);
  const tag = crypto.randomUUID().slice(0, 6);
  const electionId = `${prefix}-${tag}`;
  const dir = await Deno.makeTempDir({ prefix: `${prefix}-` });
  const { account, replicas: who } = await podBoundIdentities(
    deployed,
    leaseNs,
    "operator",
    ["replica-a", "replica-b"],
    dir,
  );
  const fences: InstalledLeaseFence[] = [
    await installShardFence(`${prefix}-sh-${tag}`, account.user, leaseNs, electionId),
    await installLeaseFence(`${prefix}-one-${tag}`, account.user, leaseNs, electionId),
  ];
  const namespaces = namespacesPerShard(`e2e-${prefix}-${tag}`, shards, 1).flat();
  for (const ns of namespaces) {
    await c.create(NAMESPACES, { metadata: { name: ns } } as KubeObject);
    await c.create(APPSERVICES, appService(ns, "app", { image: "nginx:1.27", replicas: 1 }), {
      namespace: ns,
    });
  }
  return {
    c,
    leaseNs,
    electionId,
    who,
    namespaces,
    common: [
      "--leader-elect",
      `--leader-election-namespace=${leaseNs}`,
      `--leader-election-id=${electionId}`,
      `--watch-namespace=${namespaces.join(",")}`,
      ...SHORT_LEASE_FLAGS,
    ],
    async cleanup() {
      for (const f of fences) await f.cleanup().catch(() => {});
      await account.cleanup().catch(() => {});
      for (const ns of namespaces) await dropNamespace(ns).catch(() => {});
      await dropNamespace(leaseNs).catch(() => {});
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    },
  };
}

/** Runs `body` on a fresh {@link setup}; stops the operators it adds to `ops`, then cleans up. */
async function withSetup(
  prefix: string,
  shards: number,
  body: (s: Setup, ops: Operator[]) => Promise<void>,
): Promise<void> {
  const s = await setup(prefix, shards);
  const ops: Operator[] = [];
  try {
    await body(s, ops);
  } finally {
    for (const op of ops) await op.stop().catch(() => {});
    await s.cleanup();
  }
}

function launch(s: Setup, w: ReplicaIdentity, extra: string[] = []): Promise<Operator> {
  return startOperator([`--kubeconfig=${w.kubeconfig}`, ...s.common, ...extra], {
    APPSERVICE_POD_NAME: w.podName,
  });
}

/** Changes every namespace's AppService and waits until each is reconciled (observedGeneration). */
async function changedAndReconciled(s: Setup, value: number, timeoutMs: number): Promise<void> {
  for (const ns of s.namespaces) {
    await s.c.patch(APPSERVICES, "app", { spec: { progressDeadlineSeconds: value } }, {
      namespace: ns,
    });
  }
  for (const ns of s.namespaces) {
    await waitFor(`the change in ${ns} reconciled`, async () => {
      const as = await getAs(ns, "app");
      return as.status?.observedGeneration === as.metadata?.generation;
    }, timeoutMs);
  }
}

/** Whether Lease `name` exists in the Leases' namespace. */
async function leaseExists(s: Setup, name: string): Promise<boolean> {
  return await s.c.get<Lease>(LEASES, name, { namespace: s.leaseNs }).then(
    () => true,
    (err) => {
      if (isNotFound(err)) return false;
      throw err;
    },
  );
}

/** The log line of lib/runtime/fence_repair.ts's deletion. */
const REPAIRED = "Deleted a Lease of another mode that refused this replica's writes";

/** The Pod name of each shard Lease's holder ("" for none or a missing Lease), shards 0..n-1. */
async function shardHolders(s: Setup, n: number): Promise<string[]> {
  const out: string[] = [];
  for (let k = 0; k < n; k++) {
    const l = await s.c.get<Lease>(LEASES, shardLeaseName(s.electionId, k), {
      namespace: s.leaseNs,
    }).catch(() => undefined);
    out.push((l?.spec?.holderIdentity ?? "").split("_")[0]);
  }
  return out;
}

/** The Pod name of the one Lease's holder ("" for none or a missing Lease). */
async function oneHolder(s: Setup): Promise<string> {
  const l = await s.c.get<Lease>(LEASES, s.electionId, { namespace: s.leaseNs }).catch(() =>
    undefined
  );
  return (l?.spec?.holderIdentity ?? "").split("_")[0];
}

Deno.test("mode change: shards to one Lease, overlapping — the single candidate waits for the sharded replica to go", () =>
  withSetup("mcs1", 4, async (s, ops) => {
    const b = await launch(s, s.who[1], ["--shards=4"]);
    ops.push(b);
    await b.waitReady(90_000);
    await waitFor(
      "b holds every shard",
      async () => (await shardHolders(s, 4)).every((h) => h === s.who[1].podName),
      30_000,
    );
    for (const ns of s.namespaces) {
      await waitFor(
        `${ns} Ready under b`,
        async () => (await getAs(ns, "app")).status?.ready,
        60_000,
      );
    }
    const a = await launch(s, s.who[0]);
    ops.push(a);
    await a.waitReady(90_000);
    // Several attempts (retry period 1 s): a does not take the one Lease while b holds shards, and
    // b goes on reconciling every namespace.
    await new Promise((r) => setTimeout(r, 6_000));
    assertEquals(await oneHolder(s), "", "a has not taken the one Lease");
    await changedAndReconciled(s, 601, 20_000);
    assertEquals(await b.stop("SIGTERM"), 0);
    await waitFor("a leads", async () => await oneHolder(s) === s.who[0].podName, 20_000);
    await changedAndReconciled(s, 602, 20_000);
    await waitFor("the shard Leases deleted", async () => {
      for (let k = 0; k < 4; k++) {
        if (await leaseExists(s, shardLeaseName(s.electionId, k))) return false;
      }
      return true;
    }, 20_000);
  }));

Deno.test("mode change: one Lease to shards, overlapping — the sharded replica waits, then deletes the released one Lease", () =>
  withSetup("mcs2", 2, async (s, ops) => {
    const a = await launch(s, s.who[0]);
    ops.push(a);
    await a.waitReady(90_000);
    await waitFor("a leads", async () => await oneHolder(s) === s.who[0].podName, 30_000);
    for (const ns of s.namespaces) {
      await waitFor(`${ns} Ready`, async () => (await getAs(ns, "app")).status?.ready, 60_000);
    }
    const b = await launch(s, s.who[1], ["--shards=2"]);
    ops.push(b);
    await b.waitReady(90_000);
    await new Promise((r) => setTimeout(r, 6_000));
    assertEquals(await shardHolders(s, 2), ["", ""], "b takes no shard while a leads");
    await changedAndReconciled(s, 603, 20_000);
    assertEquals(await a.stop("SIGTERM"), 0);
    await waitFor(
      "b holds both shards, the one Lease deleted",
      async () =>
        (await shardHolders(s, 2)).every((h) => h === s.who[1].podName) &&
        !await leaseExists(s, s.electionId),
      20_000,
    );
    await changedAndReconciled(s, 604, 20_000);
  }));

Deno.test("mode change: a Lease of the other mode released after a takeover is deleted once it refuses a write", () =>
  withSetup("mcs4", 2, async (s, ops) => {
    // Both modes take at once on an empty election (the rules above cannot order two first
    // attempts): whichever Lease of the other mode is left released is repaired on refusal.
    // A released shard Lease, as a sharded replica that started with a leaves it.
    const released = (name: string, extra: Record<string, unknown> = {}) =>
      s.c.create(LEASES, {
        apiVersion: "coordination.k8s.io/v1",
        kind: "Lease",
        metadata: { name, namespace: s.leaseNs, ...extra },
        spec: { holderIdentity: "", leaseDurationSeconds: 1 },
      } as KubeObject, { namespace: s.leaseNs });
    const a = await launch(s, s.who[0]);
    ops.push(a);
    await a.waitReady(90_000);
    await waitFor("a leads", async () => await oneHolder(s) === s.who[0].podName, 30_000);
    for (const ns of s.namespaces) {
      await waitFor(`${ns} Ready`, async () => (await getAs(ns, "app")).status?.ready, 60_000);
    }
    // After a's bounded sweep of shard Leases (three lease durations), a released shard Lease
    // with a range over every namespace appears (as a sharded replica's would).
    await new Promise((r) => setTimeout(r, 18_000));
    await released(shardLeaseName(s.electionId, 0), {
      labels: { [SHARD_LEASE_LABEL]: memberLabelValue(s.electionId) },
      annotations: shardLeaseMetadata(memberLabelValue(s.electionId), 0, 1).annotations,
    });
    await changedAndReconciled(s, 605, 20_000);
    await waitFor(
      "the shard Lease deleted",
      async () => !await leaseExists(s, shardLeaseName(s.electionId, 0)),
      10_000,
    );
    assert(
      a.logs().some((l) => l.message === REPAIRED),
      `a logged no "${REPAIRED}"`,
    );
  }));

Deno.test("mode change: a rolling change of --shards — the new count waits until the old count's holders are gone", () =>
  withSetup("mcs3", 4, async (s, ops) => {
    const holders = () => shardHolders(s, 4);
    const a = await launch(s, s.who[0], ["--shards=4"]);
    ops.push(a);
    await a.waitReady(90_000);
    await waitFor(
      "a holds every shard",
      async () => (await holders()).every((h) => h === s.who[0].podName),
      30_000,
    );
    const b = await launch(s, s.who[1], ["--shards=2"]);
    ops.push(b);
    await b.waitReady(90_000);
    // Several rounds (retry period 1 s): a keeps every shard, b takes none; every change is
    // reconciled (by a) meanwhile.
    await new Promise((r) => setTimeout(r, 6_000));
    assertEquals(await holders(), Array(4).fill(s.who[0].podName), "a keeps all four shards");
    await changedAndReconciled(s, 603, 20_000);
    assertEquals(await a.stop("SIGTERM"), 0);
    await waitFor("b holds the new count's two shards, the others are deleted", async () => {
      const h = await holders();
      return h[0] === s.who[1].podName && h[1] === s.who[1].podName && h[2] === "" && h[3] === "" &&
        !await leaseExists(s, shardLeaseName(s.electionId, 2)) &&
        !await leaseExists(s, shardLeaseName(s.electionId, 3));
    }, 20_000);
    await changedAndReconciled(s, 604, 20_000);
  }));
