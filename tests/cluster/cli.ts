/**
 * The `up | env | down | status` command line of the local control plane (run through cluster.ts).
 * @module
 */

import { parseArgs } from "node:util";
import { join, resolve } from "node:path";
import { withApi } from "../../lib/testing/api.ts";
import { type ClusterInfo, DEFAULT_NODES, WATCHDOG } from "../../lib/testing/config.ts";
import {
  componentsOf,
  defaultClusterDir,
  readClusterInfo,
  startCluster,
  stopCluster,
} from "../../lib/testing/lifecycle.ts";
import { belongsTo, isAlive, readPidFile } from "../../lib/testing/processes.ts";
import { errorText } from "../../lib/testing/util.ts";

/** The shell lines that point kubectl (and the operator) at a cluster: KUBECONFIG and PATH. */
function exportLines(info: ClusterInfo): string {
  return `export KUBECONFIG=${shellQuote(info.kubeconfig)}\n` +
    `export PATH=${shellQuote(info.binDir)}:"$PATH"  # the control plane's kubectl`;
}

/** `value` as one POSIX shell word (single-quoted only when it needs quoting). */
function shellQuote(value: string): string {
  return /^[\w@%+=:,./-]+$/.test(value) ? value : `'${value.replaceAll("'", `'\\''`)}'`;
}

const USAGE = `usage: deno run -A tests/cluster/cluster.ts <command> [flags]
  up [--nodes N] [--dir D]   build binaries if needed, start a cluster, leave it running; prints
                             shell exports of KUBECONFIG and PATH (its kubectl) for eval; a
                             healthy cluster already running in D is left as it is
  env [--dir D]              the same exports for the running cluster (no restart)
  down [--dir D]             stop the cluster
  status [--dir D]           show the cluster's processes and API server readiness`;

/** Runs one command of the CLI (see the usage text); returns the exit code. */
export async function cli(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      nodes: { type: "string" },
      dir: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  const command = positionals[0];
  if (values.help || !command || positionals.length > 1) {
    console.log(USAGE);
    return values.help ? 0 : 2;
  }
  const dir = resolve(values.dir ?? defaultClusterDir());
  switch (command) {
    case "up": {
      const nodes = values.nodes === undefined ? DEFAULT_NODES : Number(values.nodes);
      // A second `up` leaves a healthy cluster (and what runs against it) alone, as `kind create
      // cluster` refuses to replace one; `down` first to start afresh.
      const running = await readClusterInfo(dir);
      if (running && (await health(dir, running)).healthy) {
        console.log(
          `# a cluster is already running in ${dir}: left as it is (${running.server}); ` +
            `deno task cluster:down${values.dir ? ` --dir ${dir}` : ""} stops it`,
        );
        if (values.nodes !== undefined) {
          console.log(
            `# --nodes ${values.nodes} ignored: the running cluster keeps its Nodes ` +
              "(cluster:down, then cluster:up --nodes N, to change them)",
          );
        }
        console.log(exportLines(running));
        return 0;
      }
      const abort = new AbortController();
      const onSignal = () => abort.abort(new Error("interrupted"));
      Deno.addSignalListener("SIGINT", onSignal);
      Deno.addSignalListener("SIGTERM", onSignal);
      const startedMs = performance.now();
      try {
        const info = await startCluster({ dir, nodes, signal: abort.signal, outliveProcess: true });
        const seconds = ((performance.now() - startedMs) / 1000).toFixed(1);
        // Shell input: comments and two exports, so `eval "$(deno task cluster:up)"` sets both.
        const dirFlag = values.dir ? ` --dir ${dir}` : "";
        console.log(
          `# cluster up in ${seconds}s: ${info.server} (${nodes} kwok node${
            nodes === 1 ? "" : "s"
          }); stop it with: deno task cluster:down${dirFlag}`,
        );
        console.log(`# other shells: eval "$(deno task cluster:env${dirFlag})"`);
        console.log(exportLines(info));
      } finally {
        Deno.removeSignalListener("SIGINT", onSignal);
        Deno.removeSignalListener("SIGTERM", onSignal);
      }
      return 0;
    }
    case "env": {
      const info = await readClusterInfo(dir);
      if (!info) {
        console.error(`no cluster recorded in ${dir}: start one with deno task cluster:up`);
        return 1;
      }
      console.log(exportLines(info));
      return 0;
    }
    case "down": {
      const info = await readClusterInfo(dir);
      await stopCluster(dir);
      console.log(info ? `cluster in ${dir} stopped` : `no cluster recorded in ${dir}`);
      return 0;
    }
    case "status":
      return await status(dir);
    default:
      console.error(`unknown command ${command}\n${USAGE}`);
      return 2;
  }
}

/**
 * Whether the cluster recorded in `dir` is whole: every component it was started with
 * ({@linkcode componentsOf}: all five, or etcd and kube-apiserver for a minimal one) and the
 * watchdog alive (and this cluster's, not a reused pid), and the apiserver's /readyz answering
 * 200. `lines`: one per process and one for /readyz, for `status`.
 */
async function health(
  dir: string,
  info: ClusterInfo,
): Promise<{ healthy: boolean; lines: string[] }> {
  let healthy = true;
  const lines: string[] = [];
  for (const name of [...componentsOf(info), WATCHDOG]) {
    const pid = (await readPidFile(join(dir, "run", `${name}.pid`))) ?? info.pids[name];
    const alive = pid !== undefined && isAlive(pid) && belongsTo(pid, dir);
    healthy &&= alive;
    lines.push(`${name.padEnd(24)} ${alive ? "running" : "NOT RUNNING"} (pid ${pid ?? "-"})`);
  }
  let readyz: string;
  try {
    readyz = await withApi(info, async (api) => {
      const res = await api("GET", "/readyz");
      return res.status === 200 ? "ok" : `HTTP ${res.status}`;
    });
  } catch (err) {
    readyz = errorText(err);
  }
  healthy &&= readyz === "ok";
  lines.push(`${"readyz".padEnd(24)} ${readyz}`);
  return { healthy, lines };
}

async function status(dir: string): Promise<number> {
  const info = await readClusterInfo(dir);
  if (!info) {
    console.log(`no cluster recorded in ${dir}`);
    return 1;
  }
  console.log(
    `dir:        ${info.dir}\nserver:     ${info.server}\nkubeconfig: ${info.kubeconfig}`,
  );
  const { healthy, lines } = await health(dir, info);
  for (const l of lines) console.log(l);
  return healthy ? 0 : 1;
}
