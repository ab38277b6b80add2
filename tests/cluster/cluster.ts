/**
 * The local control plane for tests and benchmarks: etcd, kube-apiserver, kube-controller-manager,
 * kube-scheduler and kwok (simulated Nodes whose Pods become Running and Ready) on 127.0.0.1.
 *
 * Module API: {@linkcode startCluster}, {@linkcode stopCluster}, {@linkcode restartApiserver},
 * {@linkcode compactEtcd}, {@linkcode readClusterInfo}. CLI:
 *
 * ```sh
 * deno run -A tests/cluster/cluster.ts up [--nodes N] [--dir D]   # build, start, leave running
 * deno run -A tests/cluster/cluster.ts env [--dir D]              # its KUBECONFIG and PATH exports
 * deno run -A tests/cluster/cluster.ts down [--dir D]
 * deno run -A tests/cluster/cluster.ts status [--dir D]
 * ```
 *
 * Layout of a cluster folder (default `<repo>/.cache/cluster` (lifecycle.ts `defaultClusterDir`)):
 * `kubeconfig` (admin, context `appservice-local`), `cluster.json` ({@linkcode ClusterInfo}),
 * `audit.log` (Metadata level, every request), `logs/<component>.log`, `pki/`, `etcd/` (data),
 * `run/` (pid files and the supervisor protocol, see supervisor.sh).
 *
 * Processes: every component runs in its own process group (setsid), started and reaped by a small
 * bash supervisor (supervisor.sh, pid under `pids.watchdog`). The supervisor tears the cluster down
 * when the process that called {@linkcode startCluster} dies (test failure, Ctrl-C), unless the
 * cluster was started by the CLI `up`, and in any case after
 * {@linkcode WATCHDOG_MAX_LIFETIME_SECONDS}.
 *
 * Test sanitizers: the supervisor is a child process of the calling Deno process until
 * {@linkcode stopCluster} reaps it, so start and stop the cluster within one test (with steps) or
 * turn `sanitizeResources`/`sanitizeOps` off for the tests that start and stop it.
 *
 * Modules, one concern each: config.ts (types, versions, timeouts, paths), lifecycle.ts (the public
 * API), files.ts (binaries, ports, the cluster folder), pki.ts (certificates), argv.ts (component
 * command lines), processes.ts (supervisor and process groups), api.ts (etcd gateway and API
 * server), util.ts (small helpers), cli.ts (the command line). This file is the entry: it
 * re-exports the public API, so `import ... from "tests/cluster/cluster.ts"` keeps working, and
 * runs the CLI. docs/testing.md describes the local control plane for people.
 *
 * Uses Deno APIs and `node:` builtins only, plus the openssl, bash and setsid commands.
 * @module
 */

export {
  type ClusterInfo,
  CONTEXT_NAME,
  DEFAULT_NODES,
  KWOK_NODE_ANNOTATION,
  NODE_RESOURCES,
  POD_CIDR,
  SERVICE_ACCOUNT_ISSUER,
  SERVICE_CIDR,
  type StartClusterOptions,
  VERSIONS,
  WATCHDOG_MAX_LIFETIME_SECONDS,
} from "./config.ts";
export {
  cacheDir,
  compactEtcd,
  defaultClusterDir,
  readClusterInfo,
  restartApiserver,
  startCluster,
  stateDir,
  stopCluster,
} from "./lifecycle.ts";
export { issueCertificate, type IssueCertificateOptions } from "./pki.ts";

import { cli } from "./cli.ts";

if (import.meta.main) {
  try {
    Deno.exit(await cli(Deno.args));
  } catch (err) {
    console.error(err instanceof Error ? err.message : err);
    Deno.exit(1);
  }
}
