/**
 * Adversarial: short stalls of the path to the apiserver, the kind an HA control plane gives when
 * one apiserver dies without closing its connections (a host crash, a load balancer dropping its
 * state): connections open at that moment are dead for good (no byte, no FIN, no RST), new ones
 * work again a few seconds later.
 *
 * What a user expects: a stall of a few seconds costs the leader nothing (it keeps the Lease, no
 * restart), and once the path works again a change is reconciled within the 15 s S14 asks for.
 * Before: every 3 s stall cost the Lease (the renewal waited on its dead connection for the whole
 * renew deadline; exit 1), and nothing was reconciled until a restart.
 *
 * {@link TcpProxy.pause} is exactly that: every live connection and every new one stalls; after
 * {@link TcpProxy.resume} new connections work and the stalled ones stay dead.
 */
import { MESSAGES } from "../../lib/runtime/messages.ts";
import { assert, assertEquals } from "../assert.ts";
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
  kubeconfigFor,
  leaseIdentityOf,
  logsOf,
  newNamespace,
  type Operator,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";
import { TcpProxy } from "./proxy.ts";

/** S14's bound: once the path works again, a change is reconciled within this (ms). */
const RECONCILED_WITHIN_MS = 15_000;

/** Milliseconds from `since` until `ns/name` is Ready (polled every 100 ms). */
async function msUntilReady(ns: string, name: string, since: number, timeoutMs: number) {
  await waitFor(
    `${ns}/${name} Ready`,
    async () => (await getAs(ns, name)).status?.ready,
    timeoutMs,
    100,
  )
    .catch(() => {});
  const a = await getAs(ns, name).catch(() => undefined);
  return a?.status?.ready ? Date.now() - since : Infinity;
}

async function saveLogs(op: Operator | undefined, what: string) {
  const dir = Deno.env.get("ADV_LOG_DIR");
  if (dir && op) await Deno.writeTextFile(`${dir}/${what}.log`, op.stderr());
}

Deno.test("adv stall: a 3 s stall of the path costs the leader nothing; a change after it is reconciled within 15 s", async (t) => {
  const info = await cluster();
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("advstall");
  const dir = await Deno.makeTempDir({ prefix: "advstall-" });
  const proxy = TcpProxy.start(info.server);
  let op: Operator | undefined;
  try {
    const viaProxy = await kubeconfigFor(proxy.url, dir);
    op = await startOperator([
      `--kubeconfig=${viaProxy}`,
      `--watch-namespace=${ns}`,
      "--leader-elect",
      `--leader-election-namespace=${ns}`,
      "--leader-election-id=advstall",
    ]);
    const identity = await leaseIdentityOf(op);
    await op.waitReady();
    await waitFor("leading", () => logsOf(op!, MESSAGES.acquiredLease).length > 0, 30_000);
    await c.create(APPSERVICES as never, appService(ns, "before", { image: "nginx:1.27" }));
    await waitFor("before Ready", async () => (await getAs(ns, "before")).status?.ready, 60_000);

    for (let round = 1; round <= 3; round++) {
      await t.step(
        `round ${round}: stall 3 s; the leader keeps the Lease and reconciles`,
        async () => {
          proxy.pause();
          await sleep(3_000);
          proxy.resume();
          const resumedAt = Date.now();
          await c.create(
            APPSERVICES as never,
            appService(ns, `after-${round}`, { image: "nginx:1.27" }),
          );
          const ms = await msUntilReady(ns, `after-${round}`, resumedAt, 40_000);
          // Past the renew deadline of every attempt that the stall caught.
          await sleep(Math.max(0, resumedAt + 12_000 - Date.now()));
          console.log(
            `round ${round}: Ready ${ms / 1000} s after the path returned; ` +
              `Lease lost: ${logsOf(op!, MESSAGES.lostLease).length}`,
          );
          assert(await isRunning(op!), "the leader exited");
          assertEquals(logsOf(op!, MESSAGES.lostLease).length, 0, "Lease lost");
          assertEquals((await getLease(ns, "advstall"))?.spec?.holderIdentity, identity);
          assert(ms <= RECONCILED_WITHIN_MS, `Ready ${ms} ms after the path returned`);
        },
      );
    }
  } finally {
    await op?.stop("SIGTERM", 20_000);
    await saveLogs(op, "stall-leader");
    await proxy.close();
    await dropNamespace(ns);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});
