/**
 * Fenced writes end to end (issue 11, S13): two operator replicas with --leader-elect, replicas of
 * one ServiceAccount each with a token bound to a Pod of its own (so the audit log names the
 * replica of every request: `user.extra`, the Pod name), with deploy/'s Lease-holder admission
 * policy installed for them (issue 25, S23), while a bounded background loop keeps scaling and
 * editing AppServices. Each round SIGSTOPs the leader
 * for longer than the lease duration, waits until the standby holds the Lease, SIGCONTs the old
 * leader (which then finds the Lease lost and exits 1) and starts a replacement with the same
 * identity, as a Deployment would; the new leader is paused in the next round.
 *
 * From the audit log: every write (create, update, patch, delete; any resource, Events included)
 * of a replica's user lies within that user's holding of the Lease (holders and acquireTimes
 * recorded from the Lease all along), i.e. no write is received after another replica's
 * `spec.acquireTime` while the writer is not the holder. The Lease itself and the start-up
 * SelfSubjectReview (a review, which stores nothing) are not writes.
 *
 * The one exception the client's fence cannot close, counted and reported separately: a write
 * handed to fetch while its renewal was fresh, then held in the paused (or starved) process before
 * it reached the wire. Each late write is traced, by the Audit-ID the client sends, to the moment
 * it was handed to fetch (the operators' debug log line "Sending"); it belongs to that window only
 * if that was at least leaseDuration − renewDeadline before the new holder's acquireTime (the fence
 * cannot have passed it later). Anything else is a fence violation and fails the test. Such a
 * write is then the apiserver's to refuse: none of them may be applied (2xx); each is refused by
 * the policy (403), by a check made before admission (409 on a stale resourceVersion, 404), or
 * cancelled before it was decided (504 context canceled: the resumed process aborted it).
 * Short timings keep the rounds short: lease 4 s, renew deadline 3 s, retry period 1 s.
 */
import { assert, assertEquals } from "../assert.ts";
import { KubeClient } from "../../lib/kube/client.ts";
import { CONFIGMAPS, PODS, type ResourceType } from "../../lib/kube/resources.ts";
import type { Pod, Service } from "kubernetes-types/core/v1.d.ts";
import { type AppService, APPSERVICES, FINALIZER } from "../../lib/appservice/schema.ts";
import { appServiceReconciler } from "../../lib/appservice/reconcile.ts";
import { desiredPod, specHash } from "../../lib/appservice/pods.ts";
import { Reconcile } from "../../lib/runtime/controller.ts";
import { EventRecorder } from "../../lib/runtime/events.ts";
import { log } from "../../lib/runtime/log.ts";
import { CONTROLLER_UID_INDEX, controllerUidIndex, Store } from "../../lib/runtime/store.ts";
import {
  admin,
  appService,
  dropNamespace,
  getAs,
  getLease,
  installCrd,
  isRunning,
  leaseIdentityOf,
  logsOf,
  newNamespace,
  type Operator,
  REPO,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";
import { type AuditEvent, auditEvents, isWrite, microTimeMs, receivedMs } from "./audit.ts";
import { podBoundIdentities, podOf, type ReplicaIdentity } from "./identity.ts";
import { installLeaseFence, VALIDATION_FAILURE_ANNOTATION } from "./lease_fence.ts";
import { applyDeployRbac } from "./resources.ts";
import {
  type Background,
  churnAppServices,
  type Holding,
  holdingAt,
  recordHolders,
  SHORT_LEASE_FLAGS,
} from "./lease_rounds.ts";

const AS = APPSERVICES as unknown as ResourceType;
/** Pause rounds (issue 11: at least 20). */
const ROUNDS = 20;
const LEASE_MS = 4_000;
const RENEW_DEADLINE_MS = 3_000;
/** AppServices the background loop keeps changing. */
const APPS = 6;
/** Pause between two changes of the background loop (ms). */
const CHURN_INTERVAL_MS = 120;
/** Resources whose create is no state change: the start-up identity check. */
const NOT_WRITES = new Set(["selfsubjectreviews", "leases"]);

interface Replica {
  op: Operator;
  who: ReplicaIdentity;
  /** Lease holder identity (`<Pod name>_<random>`). */
  identity: string;
}

interface Round {
  /** How long the leader was paused (ms). */
  pausedMs: number;
  /** Exit code of the resumed leader (1: it found the Lease lost). */
  exitCode: number | undefined;
}

Deno.test("fenced writes: a paused leader sends no write after another replica took the Lease (S13)", async (t) => {
  await installCrd();
  const deployed = await applyDeployRbac(await admin(), REPO);
  const c = await admin();
  const leaseNs = await newNamespace("fencelease");
  const workNs = await newNamespace("fencing");
  const leaseName = `fencing-${crypto.randomUUID().slice(0, 6)}`;
  const dir = await Deno.makeTempDir({ prefix: "fencing-" });
  const { account, replicas: [whoA, whoB] } = await podBoundIdentities(
    deployed,
    leaseNs,
    "operator",
    ["replica-a", "replica-b"],
    dir,
  );
  const policy = await installLeaseFence(leaseName, account.user, leaseNs, leaseName);
  const flags = [
    "--leader-elect",
    `--leader-election-namespace=${leaseNs}`,
    `--leader-election-id=${leaseName}`,
    `--watch-namespace=${workNs}`,
    "--max-concurrent-reconciles=4",
    // Each request logged (send time, Audit-Id): a write after takeover is traced to its send.
    "--log-level=debug",
    ...SHORT_LEASE_FLAGS,
  ];
  const all: Operator[] = [];
  const startReplica = async (who: ReplicaIdentity): Promise<Replica> => {
    const op = await startOperator([`--kubeconfig=${who.kubeconfig}`, ...flags], {
      APPSERVICE_POD_NAME: who.podName,
    });
    all.push(op);
    return { op, who, identity: await leaseIdentityOf(op) };
  };
  let churn: Background<number> | undefined;
  let recorder: Background<Holding[]> | undefined;
  const since = Date.now();
  try {
    const names = Array.from({ length: APPS }, (_, i) => `app-${i}`);
    for (const name of names) {
      await c.create(
        AS,
        appService(workNs, name, { image: "nginx:1.27", ports: [{ containerPort: 80 }] }),
      );
    }
    // Every holder with its acquireTime, from before the first replica starts.
    recorder = recordHolders(leaseNs, leaseName);
    let replicas = [await startReplica(whoA)];
    await replicas[0].op.waitReady();
    await waitFor(
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

    // Bounded background changes: the leader creates and deletes Pods, writes status, records
    // Events.
    churn = churnAppServices(workNs, names, CHURN_INTERVAL_MS);
    const replace = async (gone: Replica): Promise<Replica> => {
      const r = await startReplica(gone.who);
      await r.op.waitReady();
      return r;
    };

    const rounds: Round[] = [];
    await t.step(`${ROUNDS} rounds: pause the leader past the lease, resume it`, async () => {
      for (let attempt = 0; rounds.length < ROUNDS && attempt < 2 * ROUNDS; attempt++) {
        // A replica may have lost the Lease on its own on a starved machine (exit 1): replace it.
        for (let i = 0; i < replicas.length; i++) {
          if (!(await isRunning(replicas[i].op))) replicas[i] = await replace(replicas[i]);
        }
        const lease = await getLease(leaseNs, leaseName);
        const leader = replicas.find((x) => x.identity === lease?.spec?.holderIdentity);
        if (!leader) {
          await sleep(500); // between holders
          continue;
        }
        const standby = replicas.find((x) => x !== leader)!;
        await sleep(300 + Math.random() * 1_200); // the leader works on the changes
        if (!(await isRunning(leader.op))) continue;
        const stoppedAt = performance.now();
        try {
          leader.op.child.kill("SIGSTOP");
        } catch {
          continue; // it lost the Lease and ended meanwhile (a starved machine): replaced above
        }
        const taken = await waitFor(
          "the standby holds the Lease",
          async () => {
            const l = await getLease(leaseNs, leaseName);
            return l?.spec?.holderIdentity === standby.identity ? l : undefined;
          },
          30_000,
          100,
        );
        assert(taken);
        // Keep it paused a while longer (and past the lease duration in any case: the standby may
        // take over sooner after the SIGSTOP when the leader's last renewal came well before it):
        // the new leader writes meanwhile.
        await sleep(
          Math.max(Math.random() * 2_000, LEASE_MS + 200 - (performance.now() - stoppedAt)),
        );
        leader.op.child.kill("SIGCONT");
        const pausedMs = performance.now() - stoppedAt;
        const st = await Promise.race([leader.op.status, sleep(20_000).then(() => undefined)]);
        if (!st) await leader.op.stop("SIGKILL", 10_000);
        rounds.push({ pausedMs, exitCode: st?.code });
        assert(pausedMs > LEASE_MS, `paused only ${pausedMs} ms`);
        replicas = [standby, await replace(leader)];
      }
      assertEquals(rounds.length, ROUNDS);
    });
    const changes = await churn.stop();

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
    // The holders are recorded until the audit log is read: a takeover after the rounds (a
    // replica that lost the Lease on a starved machine) is a holding like any other.
    const holdings = await recorder.stop();
    console.log(`background changes: ${changes}; holders: ${holdings.length}`);

    await t.step("audit log: no write by a replica that is not the holder", async () => {
      const writes = (await auditEvents(since)).filter((e) =>
        e.user?.username === account.user && isWrite(e) &&
        !NOT_WRITES.has(e.objectRef?.resource ?? "")
      );
      assert(writes.length > 0, "no writes in the audit log");
      // When each write was handed to fetch (debug line "Sending"), by the Audit-ID it carried.
      const sentAt = new Map<string, number>();
      for (const op of all) {
        for (const l of logsOf(op, "Sending")) {
          const p = l.properties ?? {};
          sentAt.set(p.auditId as string, p.startedAtMs as number);
        }
      }
      const late: { e: AuditEvent; afterMs: number; sentBeforeMs?: number; holder: number }[] = [];
      for (const e of writes) {
        const at = receivedMs(e);
        const k = holdingAt(holdings, at);
        if (k >= 0 && holdings[k].identity.startsWith(`${podOf(e)}_`)) continue;
        const from = k >= 0 ? holdings[k].fromMs : NaN;
        const sent = e.auditID ? sentAt.get(e.auditID) : undefined;
        late.push({
          e,
          afterMs: at - from,
          sentBeforeMs: sent === undefined ? undefined : from - sent,
          holder: k,
        });
      }
      // Handed to fetch early enough that a fresh renewal let it pass: the remaining window.
      const marginMs = LEASE_MS - RENEW_DEADLINE_MS;
      const inWindow = late.filter((l) =>
        l.sentBeforeMs !== undefined && l.sentBeforeMs >= marginMs
      );
      const violations = late.filter((l) => !inWindow.includes(l));
      const count = (message: string) => all.reduce((n, op) => n + logsOf(op, message).length, 0);
      const fenced = count("Writes fenced: the Lease renewal is stale; requeued");
      const aborted = count("Reconcile aborted: leadership lost; requeued");
      // In-situ window: each write's handing to fetch against its receipt at the apiserver.
      const lags = writes.filter((e) => e.auditID && sentAt.has(e.auditID)).map((e) =>
        microTimeMs(e.requestReceivedTimestamp!) - sentAt.get(e.auditID!)!
      ).sort((a, b) => a - b);
      const lag = (q: number) => lags[Math.min(lags.length - 1, Math.floor(q * lags.length))];
      console.log(
        `S13 in-situ window (handed to fetch -> apiserver received), ${lags.length} writes: ` +
          `median ${lag(0.5)?.toFixed(2)} ms, p99 ${lag(0.99)?.toFixed(2)} ms, ` +
          `max ${lags[lags.length - 1]?.toFixed(2)} ms`,
      );
      const describeLate = (l: (typeof late)[number]) =>
        `${podOf(l.e)} ${l.e.verb} ${l.e.requestURI} -> ${l.e.responseStatus?.code}, ` +
        `${l.afterMs.toFixed(0)} ms after acquireTime, ` +
        (l.sentBeforeMs === undefined
          ? "never handed to fetch by the client's log"
          : `handed to fetch ${l.sentBeforeMs.toFixed(0)} ms before acquireTime`);
      console.log(
        `S13: ${rounds.length} pause rounds, ${holdings.length - 1} takeovers; ` +
          `writes received after another replica's acquireTime: ${late.length} of ` +
          `${writes.length} (takeovers with one: ${new Set(late.map((l) => l.holder)).size}); ` +
          `of these in the remaining window: ${inWindow.length}, fence violations: ` +
          `${violations.length}; pauses ${Math.min(...rounds.map((r) => r.pausedMs)).toFixed(0)}-` +
          `${Math.max(...rounds.map((r) => r.pausedMs)).toFixed(0)} ms; ` +
          `reconciles requeued by the fence: ${fenced}, by the lost Lease: ${aborted}; ` +
          `exit codes ${rounds.map((r) => r.exitCode).join(",")}` +
          inWindow.map((l) => `\n  remaining window: ${describeLate(l)}`).join(""),
      );
      assertEquals(violations.map(describeLate), []);
      // The server-side fence: whatever the process did with its bytes, none of them is applied.
      const code = (l: (typeof late)[number]) => l.e.responseStatus?.code ?? 0;
      const byPolicy = late.filter((l) =>
        code(l) === 403 &&
        (l.e.annotations?.[VALIDATION_FAILURE_ANNOTATION] ?? "").includes(`"${policy.name}"`)
      );
      console.log(`S13: late writes refused by the Lease-holder policy: ${byPolicy.length}`);
      assertEquals(
        late.filter((l) => !byPolicy.includes(l) && ![404, 409, 504].includes(code(l)))
          .map(describeLate),
        [],
        "late writes neither refused by the policy, nor stale, nor cancelled",
      );
      for (const r of rounds) assertEquals(r.exitCode, 1, "the resumed leader exits 1");
    });

    // A figure, not a check (printed outside the steps): the remaining window, from the fence check
    // to the apiserver.
    {
      // A write passed by the fence can still be late only if the process stops between the
      // check and the request reaching the apiserver. Measured here: the check's wall-clock time
      // (a recording fence) against the apiserver's requestReceivedTimestamp (audit log, same
      // machine, same clock) for writes sent one at a time and eight at a time.
      const checks = new Map<string, number>();
      const agent = `appservice-e2e-window/${crypto.randomUUID().slice(0, 6)}`;
      const client = new KubeClient(c.config, {
        userAgent: agent,
        writeFence: {
          check: (_method, path) =>
            void checks.set(path, performance.timeOrigin + performance.now()),
        },
      });
      const sinceWindow = Date.now();
      const cm = (i: number) => ({
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name: `window-${i}`, namespace: workNs },
      });
      try {
        // Each create is checked on the collection path; a delete on the object's own path.
        for (let i = 0; i < 40; i++) {
          await client.create(CONFIGMAPS, cm(i));
          await client.delete(CONFIGMAPS, `window-${i}`, { namespace: workNs });
        }
        for (let i = 0; i < 5; i++) {
          await Promise.all(
            Array.from(
              { length: 8 },
              (_, j) =>
                client.delete(CONFIGMAPS, `window-${100 + i * 8 + j}`, { namespace: workNs })
                  .catch(() => {}),
            ),
          );
        }
      } finally {
        client.close();
      }
      const deletes = (await auditEvents(sinceWindow, agent)).filter((e) => e.verb === "delete");
      const gaps: number[] = [];
      for (const e of deletes) {
        const at = checks.get(new URL(e.requestURI, "https://x").pathname);
        if (at !== undefined) gaps.push(microTimeMs(e.requestReceivedTimestamp!) - at);
      }
      gaps.sort((a, b) => a - b);
      assert(gaps.length >= 40, `matched ${gaps.length} writes`);
      const q = (p: number) => gaps[Math.min(gaps.length - 1, Math.floor(p * gaps.length))];
      console.log(
        `S13 remaining window (fence check -> apiserver received), ${gaps.length} writes: ` +
          `median ${q(0.5).toFixed(2)} ms, p90 ${q(0.9).toFixed(2)} ms, ` +
          `max ${gaps[gaps.length - 1].toFixed(2)} ms`,
      );
    }
  } finally {
    await churn?.stop();
    await recorder?.stop();
    for (const op of all) await op.stop("SIGKILL", 10_000);
    await policy.cleanup();
    await dropNamespace(workNs);
    await dropNamespace(leaseNs);
    await account.cleanup();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("status writes are conditional on the resourceVersion they were computed from (S13)", async () => {
  // The reconciler run in this process on a cache that holds an older AppService (as a replica
  // paused since would): its status patch is refused with 409 and the key only requeued; the
  // newer status stays. With the live version it is written.
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("statusrv");
  try {
    await c.create(AS, appService(ns, "app", { image: "nginx:1.27" }));
    const stale = await c.patch<AppService>(AS, "app", {
      metadata: { finalizers: [FINALIZER] },
    }, { namespace: ns });
    // A newer status, written by whoever holds the Lease now.
    const newer = await c.patch<AppService>(AS, "app", {
      status: { replicasSummary: "written by the new leader" },
    }, { namespace: ns, subresource: "status" });
    assert(newer.metadata.resourceVersion !== stale.metadata.resourceVersion);
    const appServices = new Store<AppService>();
    const pods = new Store<Pod>({ indexes: { [CONTROLLER_UID_INDEX]: controllerUidIndex } });
    const services = new Store<Service>({
      indexes: { [CONTROLLER_UID_INDEX]: controllerUidIndex },
    });
    // A Pod that is already there and Ready (as kwok reports it), so that only the status is left
    // to write, and that status (Ready) is written at once: a step of a rollout could be held
    // (status.ts ROLLOUT_STEP_HOLD_MS).
    const pod = await c.create<Pod>(PODS, desiredPod(stale, 0, specHash(stale)));
    const now = new Date().toISOString();
    pods.upsert({
      ...pod,
      status: {
        phase: "Running",
        conditions: [{ type: "Ready", status: "True", lastTransitionTime: now }],
      },
    });
    appServices.upsert(stale);
    const events = new EventRecorder(c, "e2e", "e2e");
    const reconcile = appServiceReconciler({ client: c, appServices, pods, services, events });
    const ctx = {
      signal: AbortSignal.timeout(30_000),
      reconcileID: "e2e",
      logger: log("e2e"),
    };
    const result = await reconcile(`${ns}/app`, ctx);
    assertEquals(result, Reconcile.backoff());
    assertEquals((await getAs(ns, "app")).status?.replicasSummary, "written by the new leader");
    // From the live version: written.
    appServices.upsert(await getAs(ns, "app"));
    // Not requeued: the status is written.
    const written = await reconcile(`${ns}/app`, ctx);
    assert(written.kind !== "backoff", JSON.stringify(written));
    assertEquals((await getAs(ns, "app")).status?.replicasSummary, "1/1");
    await events.flush();
  } finally {
    await dropNamespace(ns);
  }
});
