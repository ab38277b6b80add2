/**
 * Leader election end to end (issue 4, S7): three operator processes share one Lease; exactly one
 * reconciles; SIGKILL of the leader hands over within lease duration plus retry period; SIGTERM
 * releases the Lease with a valid update so a standby leads within about one retry period, and the
 * old process exits 0; a leader cut off from the apiserver fences itself and exits 1 before anyone
 * else can lead. Short timings keep it fast: lease 4 s, renew deadline 3 s, retry period 1 s.
 */
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { MESSAGES } from "../../lib/runtime/messages.ts";
import { isHandoverMarker } from "../../lib/runtime/handover.ts";
import { parse as parseYaml, stringify } from "yaml";
import { assert, assertEquals } from "../assert.ts";
import { PODS } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  admin,
  appService,
  cluster,
  dropNamespace,
  getAs,
  getLease,
  installCrd,
  isRunning,
  leaderChanges,
  leaseIdentityOf as identityOf,
  logsOf,
  metricSum,
  newNamespace,
  type Operator,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";
import { TcpProxy } from "./proxy.ts";

const LEASE_MS = 4_000;
const RENEW_DEADLINE_MS = 3_000;
const RETRY_MS = 1_000;
/** Candidates wait retry period × [1, 1.2) between attempts (client-go JitterFactor 1.2). */
const RETRY_MAX_MS = RETRY_MS * 1.2;
const TIMING_FLAGS = [
  "--leader-elect-lease-duration=4s",
  "--leader-elect-renew-deadline=3s",
  "--leader-elect-retry-period=1s",
];
/** Slack for process scheduling on a busy two-core machine. */
const SLACK_MS = 2_500;

/** Reconciles an operator has run, from its controller_runtime_reconcile_total (0 before any). */
async function reconcilesOf(op: Operator): Promise<number> {
  return metricSum(await op.metrics(), "controller_runtime_reconcile_total", {}, { absent: 0 });
}

/** Writes (POST, PUT, PATCH, DELETE) an operator has sent, from its rest_client_requests_total. */
async function writesOf(op: Operator): Promise<number> {
  const text = await op.metrics();
  let n = 0;
  for (const method of ["POST", "PUT", "PATCH", "DELETE"]) {
    n += metricSum(text, "rest_client_requests_total", { method }, { absent: 0 });
  }
  return n;
}

Deno.test("leader election: three replicas, one reconciles; SIGKILL and SIGTERM failover (S7)", async (t) => {
  await installCrd();
  const c = await admin();
  const leaseNs = await newNamespace("lease");
  const workNs = await newNamespace("leader");
  const leaseName = `appservice-e2e-${crypto.randomUUID().slice(0, 6)}`;
  const flags = [
    "--leader-elect",
    `--leader-election-namespace=${leaseNs}`,
    `--leader-election-id=${leaseName}`,
    `--watch-namespace=${workNs}`,
    ...TIMING_FLAGS,
  ];
  const ops: Operator[] = [];
  try {
    for (let i = 0; i < 3; i++) ops.push(await startOperator(flags));
    const ids = await Promise.all(ops.map(identityOf));
    assertEquals(new Set(ids).size, 3, `identities not unique: ${ids}`);
    for (const id of ids) assert(/^.+_[0-9a-f]{8}$/.test(id), `identity ${id}: hostname_suffix`);
    await Promise.all(ops.map((op) => op.waitReady()));

    let leader!: Operator;
    let standbys: Operator[] = [];
    await t.step("exactly one holds the Lease and reconciles", async () => {
      const lease = await waitFor(
        "Lease held",
        async () => {
          const l = await getLease(leaseNs, leaseName);
          return l?.spec?.holderIdentity ? l : undefined;
        },
        30_000,
        100,
      );
      const holder = lease.spec!.holderIdentity!;
      const i = ids.indexOf(holder);
      assert(i >= 0, `holder ${holder} is none of ${ids}`);
      leader = ops[i];
      standbys = ops.filter((op) => op !== leader);
      assertEquals(lease.spec!.leaseDurationSeconds, LEASE_MS / 1000);
      assertEquals(lease.spec!.leaseTransitions, 0);
      await waitFor("leader acquired", async () => await leaderChanges(leader, "acquired") === 1);
      await sleep(2 * RETRY_MAX_MS); // standbys had several attempts
      // Workers start only in a process that acquired the Lease.
      assertEquals(
        await Promise.all(ops.map((op) => leaderChanges(op, "acquired"))),
        ops.map((op) => (op === leader ? 1 : 0)),
      );
      for (const s of standbys) {
        const seen = logsOf(s, "Observed leader").map((l) => l.properties?.holder);
        assert(seen.includes(holder), `standby did not observe ${holder}: ${seen}`);
      }
      const status = await Promise.all(
        ops.map(async (op) =>
          metricSum(await op.metrics(), "leader_election_master_status", { name: leaseName })
        ),
      );
      assertEquals(status, ops.map((op) => (op === leader ? 1 : 0)));

      const before = await Promise.all(standbys.map(writesOf));
      await c.create(APPSERVICES as never, appService(workNs, "web", { image: "nginx:1.27" }));
      await waitFor("web Ready", async () => (await getAs(workNs, "web")).status?.ready, 60_000);
      assertEquals(logsOf(leader, "Created Pod").length, 1);
      // The same counts see the leader's writes and reconciles, and none of the standbys'.
      assertEquals(await Promise.all(standbys.map(writesOf)), before, "a standby wrote");
      assert(await writesOf(leader) > 0);
      assertEquals(await Promise.all(standbys.map(reconcilesOf)), standbys.map(() => 0));
      assert(await reconcilesOf(leader) > 0);
    });

    let second!: Operator;
    await t.step(
      "SIGKILL the leader: another leads within lease duration + retry period",
      async () => {
        const killed = leader;
        const holderBefore = ids[ops.indexOf(killed)];
        const t0 = performance.now();
        killed.child.kill("SIGKILL");
        const lease = await waitFor(
          "another holder",
          async () => {
            const l = await getLease(leaseNs, leaseName);
            const h = l?.spec?.holderIdentity;
            // A handover marker is a takeover being sealed, not a holder.
            return h && h !== holderBefore && !isHandoverMarker(h) ? l : undefined;
          },
          30_000,
          100,
        );
        const tookMs = performance.now() - t0;
        console.log(`SIGKILL failover: ${Math.round(tookMs)} ms`);
        assert(
          tookMs <= LEASE_MS + RETRY_MAX_MS + SLACK_MS,
          `failover took ${tookMs} ms > ${LEASE_MS + RETRY_MAX_MS} ms + slack`,
        );
        assertEquals((await killed.status).signal, "SIGKILL");
        second = ops[ids.indexOf(lease.spec!.holderIdentity!)];
        assert(standbys.includes(second));
        assertEquals(lease.spec!.leaseTransitions, 1);
        await waitFor(
          "new leader acquired",
          async () => await leaderChanges(second, "acquired") === 1,
        );
        const third = standbys.find((s) => s !== second)!;
        assertEquals(await leaderChanges(third, "acquired"), 0);
        // The new leader reconciles: scale up, and only it creates the Pod.
        const thirdWrites = await writesOf(third);
        const secondWrites = await writesOf(second);
        await c.patch(APPSERVICES as never, "web", { spec: { replicas: 2 } }, {
          namespace: workNs,
        });
        await waitFor("2 Pods of web", async () => {
          const l = await c.list<Pod>(PODS, {
            namespace: workNs,
            labelSelector: "app.kubernetes.io/instance=web",
          });
          return l.items.length === 2;
        }, 60_000);
        await waitFor("second logged Created Pod", () => logsOf(second, "Created Pod").length > 0);
        assert(await writesOf(second) > secondWrites);
        assertEquals(await writesOf(third), thirdWrites, "the third wrote");
      },
    );

    await t.step(
      "SIGTERM the leader: it releases, a standby leads within ~one retry period, exit 0",
      async () => {
        const leaving = second;
        const idLeaving = ids[ops.indexOf(leaving)];
        const last = standbys.find((s) => s !== leaving)!;
        const idLast = ids[ops.indexOf(last)];
        const prev = (await getLease(leaseNs, leaseName))!;
        assertEquals(prev.spec?.holderIdentity, idLeaving);
        let released: { lease: Lease; at: number } | undefined;
        let taken: { lease: Lease; at: number } | undefined;
        const t0 = performance.now();
        const exit = leaving.stop("SIGTERM", 30_000);
        for (let i = 0; i < 1_000 && performance.now() - t0 < 20_000; i++) {
          const l = await getLease(leaseNs, leaseName);
          const h = l?.spec?.holderIdentity ?? "";
          if (l && !h && !released) released = { lease: l, at: performance.now() };
          if (l && h === idLast) {
            taken = { lease: l, at: performance.now() };
            break;
          }
          await sleep(40);
        }
        const code = await exit;
        assertEquals(code, 0, `exit code; stderr tail: ${leaving.stderr().slice(-1500)}`);
        assert(taken, "no standby took the Lease");
        const tookMs = taken.at - t0;
        console.log(
          `SIGTERM failover: ${Math.round(tookMs)} ms after SIGTERM` +
            (released ? `, ${Math.round(taken.at - released.at)} ms after the release` : ""),
        );
        assert(
          tookMs <= RETRY_MAX_MS + SLACK_MS,
          `a standby led ${tookMs} ms after SIGTERM (retry period ${RETRY_MS} ms)`,
        );
        assertEquals(logsOf(leaving, MESSAGES.releasedLease).length, 1);
        assertEquals(logsOf(leaving, MESSAGES.lostLease).length, 0);
        const stopped = logsOf(leaving, "Stopped")[0];
        assertEquals(stopped?.properties?.exitCode, 0);
        if (released) {
          // The release as the apiserver stored it (it rejects invalid updates).
          const s = released.lease.spec!;
          assertEquals(s.holderIdentity ?? "", "");
          assert(
            (s.leaseDurationSeconds ?? 0) >= 1,
            `leaseDurationSeconds ${s.leaseDurationSeconds}`,
          );
          assertEquals(s.leaseTransitions, prev.spec?.leaseTransitions);
          assert(taken.at - released.at <= RETRY_MAX_MS + SLACK_MS);
        } else {
          console.log("the released Lease was taken before it could be read; checked transitions");
        }
        // Taking a released Lease is a transition (client-go).
        assertEquals(taken.lease.spec!.leaseTransitions, (prev.spec!.leaseTransitions ?? 0) + 1);
        assertEquals(taken.lease.spec!.leaseDurationSeconds, LEASE_MS / 1000);
        await waitFor(
          "last logged Acquired",
          () => logsOf(last, MESSAGES.acquiredLease).length === 1,
        );
        await waitFor(
          "last reports master status",
          async () =>
            metricSum(await last.metrics(), "leader_election_master_status", {
              name: leaseName,
            }) === 1,
        );
        // The last one reconciles: a deleted Pod is replaced (in a free slot: the replacement
        // does not wait for the deleted Pod to be gone).
        const old = await c.get<Pod>(PODS, "web-0", { namespace: workNs });
        await c.delete(PODS, "web-0", { namespace: workNs, gracePeriodSeconds: 0 });
        await waitFor("web-0 replaced", async () => {
          const l = await c.list<Pod>(PODS, {
            namespace: workNs,
            labelSelector: "app.kubernetes.io/instance=web",
          });
          const live = l.items.filter((p) => !p.metadata?.deletionTimestamp);
          return live.length === 2 && live.every((p) => p.metadata?.uid !== old.metadata?.uid);
        }, 60_000);
        await waitFor("last logged Created Pod", () => logsOf(last, "Created Pod").length > 0);
      },
    );

    await t.step("SIGTERM the last one: exit 0 and the Lease is left released", async () => {
      const last = ops.find((op) => op !== leader && op !== second)!;
      assert(await isRunning(last));
      assertEquals(await last.stop("SIGTERM", 30_000), 0);
      const l = (await getLease(leaseNs, leaseName))!;
      assertEquals(l.spec?.holderIdentity ?? "", "");
      assertEquals(l.spec?.leaseDurationSeconds, 1);
    });
  } finally {
    for (const op of ops) await op.stop("SIGKILL", 10_000);
    await dropNamespace(workNs);
    await dropNamespace(leaseNs);
  }
});

/** A copy of the admin kubeconfig with another server URL and a context namespace. */
async function kubeconfigVia(server: string, namespace: string, dir: string): Promise<string> {
  const info = await cluster();
  // deno-lint-ignore no-explicit-any
  const cfg = parseYaml(await Deno.readTextFile(info.kubeconfig)) as any;
  for (const cl of cfg.clusters) cl.cluster.server = server;
  for (const ctx of cfg.contexts) ctx.context.namespace = namespace;
  const file = `${dir}/kubeconfig-${crypto.randomUUID().slice(0, 6)}.yaml`;
  await Deno.writeTextFile(file, stringify(cfg));
  return file;
}

Deno.test("leader election: a leader cut off from the apiserver fences itself and exits 1", async (t) => {
  const info = await cluster();
  await installCrd();
  const workNs = await newNamespace("fence");
  const dir = await Deno.makeTempDir({ prefix: "fence-" });
  try {
    for (const mode of ["cut", "paused"] as const) {
      await t.step(`connection ${mode}`, async () => {
        const leaseNs = await newNamespace("fencelease");
        const leaseName = `fence-${mode}`;
        const proxy = TcpProxy.start(info.server);
        const ops: Operator[] = [];
        try {
          // The leader talks through the proxy; its kubeconfig context names the Lease namespace
          // and no flag does: the Lease namespace defaults to the context's.
          const kubeconfig = await kubeconfigVia(proxy.url, leaseNs, dir);
          const common = [
            "--leader-elect",
            `--leader-election-id=${leaseName}`,
            `--watch-namespace=${workNs}`,
            ...TIMING_FLAGS,
          ];
          const leader = await startOperator([`--kubeconfig=${kubeconfig}`, ...common]);
          ops.push(leader);
          const idLeader = await identityOf(leader);
          await leader.waitReady();
          await waitFor(
            "Lease in the context namespace",
            async () => (await getLease(leaseNs, leaseName))?.spec?.holderIdentity === idLeader,
            30_000,
            100,
          );
          const standby = await startOperator([
            `--leader-election-namespace=${leaseNs}`,
            ...common,
          ]);
          ops.push(standby);
          const idStandby = await identityOf(standby);
          await standby.waitReady();
          await waitFor(
            "standby observed the leader",
            () => logsOf(standby, "Observed leader").some((l) => l.properties?.holder === idLeader),
          );
          // The leader renews (renewTime moves).
          const r0 = (await getLease(leaseNs, leaseName))!.spec!.renewTime;
          await waitFor(
            "a renewal",
            async () => (await getLease(leaseNs, leaseName))!.spec!.renewTime !== r0,
            10_000,
            100,
          );

          const tCut = Date.now();
          if (mode === "cut") proxy.cut();
          else proxy.pause();
          const st = await Promise.race([
            leader.status,
            sleep(RENEW_DEADLINE_MS + 10_000).then(() => undefined),
          ]);
          assert(st, `the leader did not exit; stderr tail: ${leader.stderr().slice(-1500)}`);
          assertEquals(st.code, 1);
          const lost = logsOf(leader, MESSAGES.lostLease);
          assertEquals(lost.length, 1, leader.stderr().slice(-2000));
          const lostAt = Date.parse(lost[0]["@timestamp"] as string);
          const lostAfter = lostAt - tCut;
          console.log(`${mode}: the leader fenced itself ${lostAfter} ms after the cut`);
          // The last renewal was at most one retry period before the cut.
          assert(
            lostAfter >= RENEW_DEADLINE_MS - RETRY_MAX_MS - 200 &&
              lostAfter <= RENEW_DEADLINE_MS + 1_500,
            `fenced ${lostAfter} ms after the cut (renew deadline ${RENEW_DEADLINE_MS} ms)`,
          );
          assertEquals(logsOf(leader, MESSAGES.releasedLease).length, 0);
          const stopped = logsOf(leader, "Stopped")[0];
          assertEquals(stopped?.properties?.exitCode, 1);

          // The standby leads only after the fenced leader stopped writing: never two writers.
          const l = await waitFor(
            "standby holds the Lease",
            async () => {
              const x = await getLease(leaseNs, leaseName);
              return x?.spec?.holderIdentity === idStandby ? x : undefined;
            },
            LEASE_MS + RETRY_MAX_MS + 10_000,
            100,
          );
          const acquired = await waitFor(
            "standby logged Acquired",
            () => logsOf(standby, MESSAGES.acquiredLease)[0],
          );
          const acquiredAt = Date.parse(acquired["@timestamp"] as string);
          console.log(`${mode}: the standby led ${acquiredAt - tCut} ms after the cut`);
          assert(
            acquiredAt > lostAt,
            `standby acquired at ${acquiredAt}, before the old leader fenced at ${lostAt}`,
          );
          assertEquals(l.spec!.leaseTransitions, 1);
          assertEquals(await standby.stop("SIGTERM", 30_000), 0);
        } finally {
          for (const op of ops) await op.stop("SIGKILL", 10_000);
          await proxy.close();
          await dropNamespace(leaseNs);
        }
      });
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
    await dropNamespace(workNs);
  }
});
