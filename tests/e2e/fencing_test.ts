/**
 * Fenced writes end to end (issue 11, S13): two operator replicas with --leader-elect, each with a
 * ServiceAccount of its own (so the audit log names the replica of every request), while a
 * bounded background loop keeps scaling and editing AppServices. Each round SIGSTOPs the leader
 * for longer than the lease duration, waits until the standby holds the Lease, SIGCONTs the old
 * leader (which then finds the Lease lost and exits 1) and starts a replacement with the same
 * identity, as a Deployment would; the new leader is paused in the next round.
 *
 * From the audit log: every write (create, update, patch, delete; any resource, Events included)
 * of a replica's user lies within that user's holding of the Lease, i.e. no write is received
 * after another replica's `spec.acquireTime` while the writer is not the holder. The Lease itself
 * and the start-up SelfSubjectReview (a review, which stores nothing) are not writes.
 * Short timings keep the rounds short: lease 4 s, renew deadline 3 s, retry period 1 s.
 */
import { assert, assertEquals } from "../assert.ts";
import type { ResourceType } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  admin,
  appService,
  dropNamespace,
  getAs,
  getLease,
  installCrd,
  leaseIdentityOf,
  logsOf,
  newNamespace,
  type Operator,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";
import { type AuditEvent, auditEvents, WRITE_VERBS } from "./audit.ts";
import { applyDeployRbac, type OperatorIdentity, operatorIdentity } from "./identity.ts";

const AS = APPSERVICES as unknown as ResourceType;
/** Pause rounds (issue 11: at least 20). */
const ROUNDS = 20;
const LEASE_MS = 4_000;
const TIMING_FLAGS = [
  "--leader-elect-lease-duration=4s",
  "--leader-elect-renew-deadline=3s",
  "--leader-elect-retry-period=1s",
];
/** AppServices the background loop keeps changing. */
const APPS = 6;
/** Pause between two changes of the background loop (ms). */
const CHURN_INTERVAL_MS = 120;
/** Resources whose create is no state change: the start-up identity check. */
const NOT_WRITES = new Set(["selfsubjectreviews", "leases"]);

interface Replica {
  op: Operator;
  who: OperatorIdentity;
  /** Lease holder identity (hostname_suffix). */
  identity: string;
}

interface Round {
  /** User of the paused leader, and of the replica that took over. */
  pausedUser: string;
  holderUser: string;
  /** The new holder's `spec.acquireTime` (epoch ms). */
  acquireMs: number;
  /** How long the leader was paused (ms). */
  pausedMs: number;
  /** Exit code of the resumed leader (1: it found the Lease lost). */
  exitCode: number | undefined;
}

const receivedMs = (e: AuditEvent) => Date.parse(e.requestReceivedTimestamp ?? e.stageTimestamp);

Deno.test("fenced writes: a paused leader sends no write after another replica took the Lease (S13)", async (t) => {
  await installCrd();
  await applyDeployRbac();
  const c = await admin();
  const leaseNs = await newNamespace("fencelease");
  const workNs = await newNamespace("fencing");
  const leaseName = `fencing-${crypto.randomUUID().slice(0, 6)}`;
  const dir = await Deno.makeTempDir({ prefix: "fencing-" });
  const whoA = await operatorIdentity(leaseNs, "replica-a", dir);
  const whoB = await operatorIdentity(leaseNs, "replica-b", dir);
  const flags = [
    "--leader-elect",
    `--leader-election-namespace=${leaseNs}`,
    `--leader-election-id=${leaseName}`,
    `--watch-namespace=${workNs}`,
    "--max-concurrent-reconciles=4",
    ...TIMING_FLAGS,
  ];
  const all: Operator[] = [];
  const startReplica = async (who: OperatorIdentity): Promise<Replica> => {
    const op = await startOperator([`--kubeconfig=${who.kubeconfig}`, ...flags]);
    all.push(op);
    return { op, who, identity: await leaseIdentityOf(op) };
  };
  let churning = true;
  let churn: Promise<number> = Promise.resolve(0);
  const since = Date.now();
  try {
    const names = Array.from({ length: APPS }, (_, i) => `app-${i}`);
    for (const name of names) {
      await c.create(
        AS,
        appService(workNs, name, { image: "nginx:1.27", ports: [{ containerPort: 80 }] }),
      );
    }
    let replicas = [await startReplica(whoA)];
    await replicas[0].op.waitReady();
    const first = await waitFor(
      "A holds the Lease",
      async () => {
        const l = await getLease(leaseNs, leaseName);
        return l?.spec?.holderIdentity === replicas[0].identity ? l : undefined;
      },
      30_000,
      100,
    );
    replicas.push(await startReplica(whoB));
    await replicas[1].op.waitReady();
    await waitFor("every AppService Ready", async () => {
      for (const n of names) if (!(await getAs(workNs, n)).status?.ready) return false;
      return true;
    }, 90_000);

    // Bounded background changes: scale 1..3 and switch the image every other pass, so the leader
    // creates and deletes Pods, replaces drifted ones, writes status and records Events.
    churn = (async () => {
      const deadline = Date.now() + 20 * 60_000;
      let n = 0;
      for (let i = 0; churning && i < 50_000 && Date.now() < deadline; i++) {
        const pass = Math.floor(i / APPS);
        const spec = { replicas: 1 + (pass % 3), image: pass % 2 ? "nginx:1.28" : "nginx:1.27" };
        await c.patch(AS, names[i % APPS], { spec }, { namespace: workNs }).then(
          () => n++,
          () => {},
        );
        await sleep(CHURN_INTERVAL_MS);
      }
      return n;
    })();

    const rounds: Round[] = [];
    await t.step(`${ROUNDS} rounds: pause the leader past the lease, resume it`, async () => {
      for (let r = 0; r < ROUNDS; r++) {
        const lease = await getLease(leaseNs, leaseName);
        const leader = replicas.find((x) => x.identity === lease?.spec?.holderIdentity);
        assert(leader, `round ${r}: the holder ${lease?.spec?.holderIdentity} is no replica`);
        const standby = replicas.find((x) => x !== leader)!;
        await sleep(300 + Math.random() * 1_200); // the leader works on the changes
        const stoppedAt = performance.now();
        leader.op.child.kill("SIGSTOP");
        const taken = await waitFor(
          "the standby holds the Lease",
          async () => {
            const l = await getLease(leaseNs, leaseName);
            return l?.spec?.holderIdentity === standby.identity ? l : undefined;
          },
          30_000,
          100,
        );
        // Keep it paused a while longer: the new leader writes meanwhile.
        await sleep(Math.random() * 2_000);
        leader.op.child.kill("SIGCONT");
        const pausedMs = performance.now() - stoppedAt;
        const replacement = await startReplica(leader.who);
        const st = await Promise.race([leader.op.status, sleep(20_000).then(() => undefined)]);
        if (!st) await leader.op.stop("SIGKILL", 10_000);
        rounds.push({
          pausedUser: leader.who.user,
          holderUser: standby.who.user,
          acquireMs: Date.parse(taken.spec!.acquireTime!),
          pausedMs,
          exitCode: st?.code,
        });
        assert(pausedMs > LEASE_MS, `paused only ${pausedMs} ms`);
        replicas = [standby, replacement];
        await replacement.op.waitReady();
      }
    });
    churning = false;
    const changes = await churn;
    console.log(`background changes: ${changes}`);

    await t.step("the last leader converges every AppService", async () => {
      await waitFor("every AppService Ready at its generation", async () => {
        for (const n of names) {
          const a = await getAs(workNs, n);
          if (!a.status?.ready || a.status.observedGeneration !== a.metadata.generation) {
            return false;
          }
        }
        return true;
      }, 90_000);
    });

    await t.step("audit log: no write by a replica that is not the holder", async () => {
      // Holding intervals: the first holder from its acquireTime, then each round's new holder.
      const intervals = [
        { user: whoA.user, from: Date.parse(first.spec!.acquireTime!) },
        ...rounds.map((r) => ({ user: r.holderUser, from: r.acquireMs })),
      ];
      const users = new Set([whoA.user, whoB.user]);
      const writes = (await auditEvents(since)).filter((e) =>
        users.has(e.user?.username ?? "") && WRITE_VERBS.has(e.verb) &&
        !NOT_WRITES.has(e.objectRef?.resource ?? "")
      );
      assert(writes.length > 0, "no writes in the audit log");
      const leaks: { round: number; e: AuditEvent; afterMs: number }[] = [];
      for (const e of writes) {
        const at = receivedMs(e);
        let k = -1;
        for (let i = 0; i < intervals.length; i++) if (intervals[i].from <= at) k = i;
        if (k >= 0 && intervals[k].user === e.user?.username) continue;
        // Before the first acquisition (k = -1) nobody may write either.
        leaks.push({ round: k - 1, e, afterMs: k >= 0 ? at - intervals[k].from : NaN });
      }
      const leakedRounds = new Set(leaks.map((l) => l.round)).size;
      const fenced = all.reduce(
        (n, op) => n + logsOf(op, "Writes fenced: the Lease renewal is stale; requeued").length,
        0,
      );
      console.log(
        `S13: rounds with a write after takeover: ${leakedRounds}/${rounds.length}; ` +
          `writes after takeover: ${leaks.length} of ${writes.length}; ` +
          `latest ${
            Math.max(0, ...leaks.map((l) => l.afterMs)).toFixed(0)
          } ms after acquireTime; ` +
          `pauses ${Math.min(...rounds.map((r) => r.pausedMs)).toFixed(0)}-` +
          `${Math.max(...rounds.map((r) => r.pausedMs)).toFixed(0)} ms; ` +
          `reconciles aborted by the fence: ${fenced}; ` +
          `exit codes ${rounds.map((r) => r.exitCode).join(",")}`,
      );
      assertEquals(
        leaks.map((l) =>
          `round ${l.round}: ${l.e.user?.username} ${l.e.verb} ${l.e.requestURI} -> ` +
          `${l.e.responseStatus?.code}, ${l.afterMs.toFixed(0)} ms after acquireTime`
        ),
        [],
      );
      for (const r of rounds) assertEquals(r.exitCode, 1, "the resumed leader exits 1");
    });
  } finally {
    churning = false;
    await churn;
    for (const op of all) await op.stop("SIGKILL", 10_000);
    await dropNamespace(workNs);
    await dropNamespace(leaseNs);
    await whoA.cleanup();
    await whoB.cleanup();
    await Deno.remove(dir, { recursive: true });
  }
});
