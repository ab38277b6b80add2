/**
 * Adversarial: resources held by a long-running operator whose path to the apiserver keeps
 * failing. A user expects an operator that lived through hundreds of dropped and stalled
 * connections to hold as many sockets as one that did not: every connection the client gave up
 * on is closed, not left in a pool or a closed HTTP client.
 *
 * Counted from outside, as `ls -l /proc/PID/fd` would: the operator's open sockets.
 */
import { assert } from "../assert.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  admin,
  appService,
  cluster,
  dropNamespace,
  getAs,
  installCrd,
  kubeconfigFor,
  newNamespace,
  type Operator,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";
import { TcpProxy } from "./proxy.ts";

/** Open sockets of a process (entries of /proc/PID/fd that link to `socket:[...]`). */
async function socketsOf(pid: number): Promise<number> {
  let n = 0;
  for await (const e of Deno.readDir(`/proc/${pid}/fd`)) {
    try {
      if ((await Deno.readLink(`/proc/${pid}/fd/${e.name}`)).startsWith("socket:")) n++;
    } catch { /* closed meanwhile */ }
  }
  return n;
}

/** The deno process of the operator: the harness spawns `deno run` directly. */
const pidOf = (op: Operator) => op.child.pid;

Deno.test("adv leaks: cut and stalled connections are closed, not kept (sockets stay flat)", async (t) => {
  const info = await cluster();
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("advleak");
  const dir = await Deno.makeTempDir({ prefix: "advleak-" });
  const proxy = TcpProxy.start(info.server);
  let op: Operator | undefined;
  try {
    const viaProxy = await kubeconfigFor(proxy.url, dir);
    op = await startOperator([
      `--kubeconfig=${viaProxy}`,
      `--watch-namespace=${ns}`,
      "--leader-elect",
      `--leader-election-namespace=${ns}`,
      "--leader-election-id=advleak",
    ]);
    await op.waitReady();
    await c.create(APPSERVICES as never, appService(ns, "a", { image: "nginx:1.27" }));
    await waitFor("a Ready", async () => (await getAs(ns, "a")).status?.ready, 60_000);
    await sleep(3_000);
    const before = await socketsOf(pidOf(op));

    await t.step("30 cuts of every connection, 2 s apart, with changes in between", async () => {
      for (let i = 0; i < 30; i++) {
        proxy.cut();
        await sleep(100);
        proxy.resume();
        await c.patch(APPSERVICES as never, "a", { spec: { replicas: 1 + (i % 3) } }, {
          namespace: ns,
        });
        await sleep(1_900);
      }
    });

    await t.step("4 stalls of 4 s each (no FIN, no RST), then the path returns", async () => {
      for (let i = 0; i < 4; i++) {
        proxy.pause();
        await sleep(4_000);
        proxy.resume();
        await sleep(5_000);
      }
    });

    await t.step("settled: reconciling, and no more sockets than before", async () => {
      await c.patch(APPSERVICES as never, "a", { spec: { replicas: 2 } }, { namespace: ns });
      await waitFor("a Ready at 2", async () => {
        const a = await getAs(ns, "a");
        return a.status?.ready && a.status.replicas === 2;
      }, 60_000);
      await sleep(5_000);
      const after = await socketsOf(pidOf(op!));
      console.log(
        `operator sockets: ${before} before, ${after} after 30 cuts and 4 stalls ` +
          `(proxy accepted ${proxy.accepted} connections)`,
      );
      assert(after <= before + 3, `sockets grew from ${before} to ${after}`);
    });
  } finally {
    await op?.stop("SIGTERM", 20_000);
    const logFile = Deno.env.get("ADV_LOG");
    if (logFile && op) await Deno.writeTextFile(logFile, op.stderr());
    await proxy.close();
    await dropNamespace(ns);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});
