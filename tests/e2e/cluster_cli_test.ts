/**
 * The local control plane's command line (tests/cluster/cluster.ts, `deno task cluster:up` and
 * the `status` command) on a minimal control plane of its own (etcd and kube-apiserver,
 * `components: "minimal"`, in a temporary folder; not the suite's): `status` checks the
 * components the plane was started with, so a healthy minimal plane is reported healthy (exit 0)
 * with no line for the components it does not run; `up --nodes 2` on it leaves it as it is (the
 * same kube-apiserver process) and says in one line that `--nodes` is ignored; once the plane is
 * stopped, `status` reports it gone (exit 1, the positive control of the exit code).
 */
import { assert, assertEquals } from "../assert.ts";
import { startControlPlane } from "../../lib/testing/mod.ts";

const CLI = new URL("../cluster/cluster.ts", import.meta.url).pathname;

/** Runs the CLI with `args` (bounded: 120 s); its exit code and stdout. */
async function cli(...args: string[]): Promise<{ code: number; out: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", CLI, ...args],
    stdout: "piped",
    stderr: "inherit",
    signal: AbortSignal.timeout(120_000),
  }).output();
  return { code: out.code, out: new TextDecoder().decode(out.stdout) };
}

Deno.test("cluster CLI: status and up on a minimal control plane check what it runs", async (t) => {
  const plane = await startControlPlane({ components: "minimal" });
  let stopped = false;
  try {
    const dir = plane.dir;
    const apiserverPid = plane.info.pids["kube-apiserver"];

    await t.step("status: healthy, etcd, kube-apiserver and the watchdog; exit 0", async () => {
      const { code, out } = await cli("status", "--dir", dir);
      const processes = out.split("\n").filter((l) => / running| NOT RUNNING/.test(l))
        .map((l) => l.split(/\s+/).slice(0, 2).join(" "));
      assertEquals(processes, ["etcd running", "kube-apiserver running", "watchdog running"], out);
      assert(/^readyz\s+ok$/m.test(out), out);
      assertEquals(code, 0, out);
    });

    await t.step("up --nodes 2: left as it is, one line says --nodes is ignored", async () => {
      const { code, out } = await cli("up", "--nodes", "2", "--dir", dir);
      assertEquals(code, 0, out);
      assert(out.includes(`# a cluster is already running in ${dir}: left as it is`), out);
      const ignored = out.split("\n").filter((l) => l.includes("--nodes 2 ignored"));
      assertEquals(ignored.length, 1, out);
      assert(out.includes(`export KUBECONFIG=${plane.kubeconfig}`), out);
      const pidFile = await Deno.readTextFile(`${dir}/run/kube-apiserver.pid`);
      assertEquals(Number(pidFile.trim()), apiserverPid, "kube-apiserver was restarted");
      // Without --nodes, no such line.
      const plain = await cli("up", "--dir", dir);
      assertEquals([plain.code, plain.out.includes("ignored")], [0, false], plain.out);
    });

    await t.step("stopped: status exits 1", async () => {
      await plane.stop();
      stopped = true;
      const { code, out } = await cli("status", "--dir", dir);
      assertEquals(code, 1, out);
    });
  } finally {
    if (!stopped) await plane.stop();
  }
});
