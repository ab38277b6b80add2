/**
 * Runs the namespace-quota example: `deno run -A examples/namespace-quota/main.ts
 * [--kubeconfig PATH] [--health-probe-bind-address :8081] [--metrics-bind-address :8080]`, until
 * SIGINT or SIGTERM.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { KubeClient, loadClusterConfig } from "../../lib/kube/mod.ts";
import { Manager, setupLogging } from "../../lib/runtime/mod.ts";
import { addNamespaceQuotaController } from "./controller.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    "kubeconfig": { type: "string" },
    "health-probe-bind-address": { type: "string", default: ":8081" },
    "metrics-bind-address": { type: "string", default: ":8080" },
  },
});
await setupLogging("info", "json");
const client = new KubeClient(loadClusterConfig({ kubeconfig: values.kubeconfig }));
const manager = new Manager({
  client,
  healthProbeBindAddress: values["health-probe-bind-address"],
  metricsBindAddress: values["metrics-bind-address"],
});
addNamespaceQuotaController(manager);
const stop = new AbortController();
for (const sig of ["SIGINT", "SIGTERM"] as const) Deno.addSignalListener(sig, () => stop.abort());
const code = await manager.run(stop.signal);
client.close();
Deno.exit(code);
