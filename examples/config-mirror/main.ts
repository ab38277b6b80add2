/**
 * Runs the config-mirror example until SIGINT or SIGTERM; the CRD (crd.yaml) must be applied
 * first:
 *
 * ```sh
 * deno run -A examples/config-mirror/main.ts [--kubeconfig PATH] [--resync-ms 10000]
 *   [--health-probe-bind-address :8081] [--metrics-bind-address :8080]
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { KubeClient, loadClusterConfig } from "../../lib/kube/mod.ts";
import { Manager, setupLogging } from "../../lib/runtime/mod.ts";
import { addConfigMirrorController, DEFAULT_RESYNC_MS } from "./controller.ts";

/** A string flag with its default. */
const flag = (value?: string) => ({ type: "string" as const, default: value });
const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    kubeconfig: flag(),
    "resync-ms": flag(String(DEFAULT_RESYNC_MS)),
    "health-probe-bind-address": flag(":8081"),
    "metrics-bind-address": flag(":8080"),
  },
});
const resyncMs = Number(flags["resync-ms"]);
if (!Number.isInteger(resyncMs) || resyncMs < 100) {
  console.error("--resync-ms must be a whole number of milliseconds, at least 100");
  Deno.exit(2);
}
await setupLogging("info", "json");
const client = new KubeClient(loadClusterConfig({ kubeconfig: flags.kubeconfig }));
const healthProbeBindAddress = flags["health-probe-bind-address"];
const manager = new Manager({
  client,
  healthProbeBindAddress,
  metricsBindAddress: flags["metrics-bind-address"],
});
addConfigMirrorController(manager, { resyncMs });
const stop = new AbortController();
Deno.addSignalListener("SIGINT", () => stop.abort());
Deno.addSignalListener("SIGTERM", () => stop.abort());
// 0 after a signal; the client is closed before the process exits.
Deno.exit(await manager.run(stop.signal).finally(() => client.close()));
