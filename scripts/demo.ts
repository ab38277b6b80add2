/**
 * The quickstart (`./scripts/demo`, or `deno task demo`): builds or reuses the control-plane
 * binaries, starts the local control plane, installs the CRD, runs the operator (`deno task start`
 * flags, readable logs), applies examples/appservice.yaml and shows `kubectl get as` until the
 * AppService is Ready. Then it keeps running until Ctrl-C (or exits at once with `--once`), and
 * stops the operator and the control plane on the way out.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { join } from "node:path";
import { startCluster, stateDir, stopCluster } from "../tests/cluster/cluster.ts";
import { freePort } from "../tests/cluster/host.ts";
import { startFlags } from "./compile.ts";

const REPO = new URL("../", import.meta.url).pathname.replace(/\/$/, "");
const { values } = parseArgs({
  args: Deno.args,
  options: {
    once: { type: "boolean", default: false },
    file: { type: "string", default: "examples/appservice.yaml" },
  },
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function kubectl(binDir: string, kubeconfig: string, args: string[]) {
  const out = await new Deno.Command(join(binDir, "kubectl"), {
    args: [`--kubeconfig=${kubeconfig}`, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  return {
    ok: out.success,
    text: new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr),
  };
}

async function main(): Promise<number> {
  const stop = new AbortController();
  const onSig = () => stop.abort();
  Deno.addSignalListener("SIGINT", onSig);
  Deno.addSignalListener("SIGTERM", onSig);
  // Its own folder: the demo must not replace a cluster started with `deno task cluster:up`.
  const dir = join(stateDir(), "demo-cluster");
  console.log("==> starting the local control plane (first run builds it from Go modules) ...");
  const info = await startCluster({ dir, signal: stop.signal });
  let operator: Deno.ChildProcess | undefined;
  try {
    const k = (args: string[]) => kubectl(info.binDir, info.kubeconfig, args);
    console.log(`==> control plane up: ${info.server}`);
    console.log("==> installing the AppService CRD");
    const crd = await k(["apply", "-f", join(REPO, "crd/appservice.yaml")]);
    if (!crd.ok) throw new Error(crd.text);
    await k([
      "wait",
      "--for=condition=Established",
      "crd/appservices.apps.our-org.com",
      "--timeout=30s",
    ]);

    console.log("==> starting the operator (deno task start)");
    const perms = await startFlags();
    const healthPort = freePort();
    const metricsPort = freePort();
    operator = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        ...perms,
        join(REPO, "main.ts"),
        `--kubeconfig=${info.kubeconfig}`,
        "--log-format=console",
        `--health-probe-bind-address=127.0.0.1:${healthPort}`,
        `--metrics-bind-address=127.0.0.1:${metricsPort}`,
      ],
      stdin: "null",
      stdout: "inherit",
      stderr: "inherit",
    }).spawn();

    console.log(`==> kubectl apply -f ${values.file}`);
    const applied = await k(["apply", "-f", join(REPO, values.file!)]);
    if (!applied.ok) throw new Error(applied.text);
    const name = /^\S+\/(\S+)/.exec(applied.text.trim())?.[1] ?? "hello";
    let ready = false;
    const deadline = Date.now() + 120_000;
    while (!stop.signal.aborted && Date.now() < deadline) {
      const got = await k(["get", "as", name, "-o", "jsonpath={.status.ready}"]);
      if (got.text.trim() === "true") {
        ready = true;
        break;
      }
      await sleep(500);
    }
    const table = await k(["get", "as,pods,svc", "-l", `app.kubernetes.io/instance=${name}`]);
    const asTable = await k(["get", "as"]);
    console.log(`\n$ kubectl get as\n${asTable.text}`);
    console.log(`$ kubectl get pods,svc -l app.kubernetes.io/instance=${name}\n${table.text}`);
    if (!ready) {
      console.log("AppService did not become Ready within 2 minutes (see the operator log above)");
      return 1;
    }
    console.log(`AppService ${name} is Ready.`);
    // Its PodDisruptionBudget (replicas >= 2): computed by kube-controller-manager, which may meet
    // the brand-new kind before its discovery does; the operator asks it again (docs/api.md).
    const pdbOf = () => k(["get", "pdb", name, "-o", "jsonpath={.status.disruptionsAllowed}"]);
    if ((await pdbOf()).ok) {
      let allowed = false;
      for (let i = 0; i < 120 && !stop.signal.aborted; i++) {
        const got = await pdbOf();
        if (Number(got.text.trim()) >= 1) {
          allowed = true;
          break;
        }
        await sleep(500);
      }
      console.log(`\n$ kubectl get pdb ${name}\n${(await k(["get", "pdb", name])).text}`);
      if (!allowed) {
        console.log(
          "Its PodDisruptionBudget allows no eviction yet (see docs/api.md, Disruptions).",
        );
      }
    }
    if (values.once) return 0;
    console.log(
      `\nThe operator keeps running. In another shell:\n  export KUBECONFIG=${info.kubeconfig}\n` +
        `  export PATH=${info.binDir}:"$PATH"   # the control plane's kubectl\n` +
        `  kubectl get as\n` +
        `  curl 'http://127.0.0.1:${healthPort}/readyz?verbose'   # its checks\n` +
        `Its /metrics is https://127.0.0.1:${metricsPort}/metrics, for a token allowed to read it ` +
        `(docs/security.md).\nPress Ctrl-C to stop the operator and the control plane.`,
    );
    await new Promise<void>((r) =>
      stop.signal.addEventListener("abort", () => r(), { once: true })
    );
    return 0;
  } finally {
    if (operator) {
      try {
        operator.kill("SIGTERM");
      } catch { /* gone */ }
      await operator.status;
    }
    console.log("==> stopping the control plane");
    await stopCluster(dir);
  }
}

try {
  Deno.exit(await main());
} catch (err) {
  console.error(`error: ${(err as Error).message}`);
  Deno.exit(1);
}
