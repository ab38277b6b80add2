/**
 * Adversarial: the Lease deleted by hand (`kubectl delete lease ...`, a namespace cleanup script,
 * a GitOps tool pruning what it does not know) while a leader runs and a standby waits.
 *
 * What a user expects: still at most one replica writes at any moment. The standby must not take
 * the missing Lease while the leader it last saw may still be working: it waits, as it would for
 * an expired Lease, a lease duration after that leader's last renewal; the leader, still alive,
 * re-creates its Lease and goes on.
 *
 * The race is made certain by a short pause of the leader (SIGSTOP for 3 s, well within its renew
 * deadline: a GC pause, a starved CPU) over the deletion: the standby's next attempt finds no
 * Lease. Before: the standby created it and led at once while the resumed leader, renewed 3 s
 * earlier, wrote again (1 write, 1 s after the standby's first) until its next attempt saw the other
 * holder, then exited 1.
 */
import { MESSAGES } from "../../lib/runtime/messages.ts";
import { assert, assertEquals } from "../assert.ts";
import { LEASES } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import { auditEvents, receivedMs, WRITE_VERBS } from "./audit.ts";
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
import { operatorIdentity } from "./identity.ts";
import { applyDeployRbac } from "./resources.ts";

const AS = APPSERVICES as never;
const APPS = 3;
const ROUNDS = 3;

Deno.test("adv lease: the Lease deleted by hand — never two replicas writing at once", async (t) => {
  await installCrd();
  const c = await admin();
  const deployed = await applyDeployRbac(c, REPO);
  const leaseNs = await newNamespace("advlease");
  const workNs = await newNamespace("advleasew");
  const dir = await Deno.makeTempDir({ prefix: "advlease-" });
  const whoA = await operatorIdentity(deployed, leaseNs, "replica-a", dir);
  const whoB = await operatorIdentity(deployed, leaseNs, "replica-b", dir);
  const flags = [
    "--leader-elect",
    `--leader-election-namespace=${leaseNs}`,
    "--leader-election-id=advlease",
    `--watch-namespace=${workNs}`,
  ];
  const ops: Operator[] = [];
  let churning = true;
  let churn: Promise<void> = Promise.resolve();
  try {
    const names = Array.from({ length: APPS }, (_, i) => `app-${i}`);
    for (const n of names) await c.create(AS, appService(workNs, n, { image: "nginx:1.27" }));
    const a = await startOperator([`--kubeconfig=${whoA.kubeconfig}`, ...flags]);
    ops.push(a);
    const idA = await leaseIdentityOf(a);
    await waitFor(
      "A leads",
      async () => (await getLease(leaseNs, "advlease"))?.spec?.holderIdentity === idA,
      30_000,
    );
    const b = await startOperator([`--kubeconfig=${whoB.kubeconfig}`, ...flags]);
    ops.push(b);
    await b.waitReady();
    await waitFor("every AppService Ready", async () => {
      for (const n of names) if (!(await getAs(workNs, n)).status?.ready) return false;
      return true;
    }, 90_000);
    // Changes all along, so whoever leads writes.
    churn = (async () => {
      for (let i = 0; churning && i < 10_000; i++) {
        await c.patch(AS, names[i % APPS], { spec: { replicas: 1 + (i % 2) } }, {
          namespace: workNs,
        }).catch(() => {});
        await sleep(150);
      }
    })();

    for (let round = 1; round <= ROUNDS; round++) {
      await t.step(
        `round ${round}: the leader pauses 3 s; its Lease is deleted meanwhile`,
        async () => {
          const leader = (await getLease(leaseNs, "advlease"))?.spec?.holderIdentity;
          const [lead, standby] = leader === idA ? [a, b] : [b, a];
          const since = Date.now();
          Deno.kill(lead.child.pid, "SIGSTOP");
          try {
            await c.delete(LEASES, "advlease", { namespace: leaseNs });
            await sleep(3_000);
          } finally {
            Deno.kill(lead.child.pid, "SIGCONT");
          }
          await sleep(12_000);
          const writes = (await auditEvents(since)).filter((e) =>
            WRITE_VERBS.has(e.verb) && e.objectRef?.namespace === workNs
          );
          const byUser = (u: string) =>
            writes.filter((e) => e.user?.username === u).map(receivedMs);
          const wa = byUser(whoA.user);
          const wb = byUser(whoB.user);
          // Writes of the paused leader after the standby's first write: two writers at once.
          const [old, other] = lead === a ? [wa, wb] : [wb, wa];
          const late = other.length ? old.filter((ms) => ms > Math.min(...other)).length : 0;
          const holder = (await getLease(leaseNs, "advlease"))?.spec?.holderIdentity;
          console.log(
            `round ${round}: writes A ${wa.length}, B ${wb.length}; ` +
              `writes of the paused leader after the other's first: ${late}; ` +
              `holder now ${holder === idA ? "A" : holder ? "B" : "none"}; ` +
              `exited: ${!(await isRunning(lead)) ? "leader" : ""} ${
                !(await isRunning(standby)) ? "standby" : ""
              }`,
          );
          assertEquals(late, 0, "both replicas wrote");
          assert(await isRunning(lead), "the paused leader exited");
          assert(await isRunning(standby), "the standby exited");
          assertEquals(holder, leader, "leadership moved although its holder was alive");
          assertEquals(logsOf(lead, MESSAGES.lostLease).length, 0);
        },
      );
    }
  } finally {
    churning = false;
    await churn;
    for (const op of ops) await op.stop("SIGTERM", 20_000);
    const logDir = Deno.env.get("ADV_LOG_DIR");
    if (logDir) {
      for (const [i, op] of ops.entries()) {
        await Deno.writeTextFile(`${logDir}/lease-${i}.log`, op.stderr());
      }
    }
    await whoA.cleanup();
    await whoB.cleanup();
    await dropNamespace(workNs);
    await dropNamespace(leaseNs);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});
