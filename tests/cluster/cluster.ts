/**
 * The command line of the local control plane, and the module the repository's tests, benchmarks
 * and demo import it from. The control plane itself — etcd, kube-apiserver,
 * kube-controller-manager, kube-scheduler and kwok on 127.0.0.1, its binaries, certificates,
 * supervisor and folder layout — is the `./testing` entry module, lib/testing/ (mod.ts: the
 * documented API; lifecycle.ts: {@linkcode startCluster} and the other functions re-exported
 * here). This folder adds what only this repository needs: the CLI (cli.ts), the repository's
 * folders ({@linkcode stateDir}, {@linkcode defaultClusterDir}), host.ts (helpers for programs run
 * beside it), finalizer_policy.ts (deploy/'s policy installed on it) and the build scripts of the
 * other tools the tests use (build_helm.sh, build_prometheus.sh).
 *
 * ```sh
 * deno run -A tests/cluster/cluster.ts up [--nodes N] [--dir D]   # build, start, leave running
 * deno run -A tests/cluster/cluster.ts env [--dir D]              # its KUBECONFIG and PATH exports
 * deno run -A tests/cluster/cluster.ts down [--dir D]
 * deno run -A tests/cluster/cluster.ts status [--dir D]
 * ```
 *
 * Layout of a cluster folder (default `<repo>/.cache/cluster`): `kubeconfig` (admin, context
 * `appservice-local`), `cluster.json` ({@linkcode ClusterInfo}), `audit.log` (Metadata level, every
 * request), `logs/<component>.log`, `pki/`, `etcd/` (data), `run/` (pid files and the supervisor
 * protocol, see lib/testing/supervisor.sh), `users/` (kubeconfigs made by `kubeconfigFor`).
 * docs/testing.md describes the local control plane for people.
 * @module
 */

export {
  CONTEXT_NAME,
  DEFAULT_NODES,
  KWOK_NODE_ANNOTATION,
  NODE_RESOURCES,
  POD_CIDR,
  SERVICE_ACCOUNT_ISSUER,
  SERVICE_CIDR,
  VERSIONS,
  WATCHDOG_MAX_LIFETIME_SECONDS,
} from "../../lib/testing/config.ts";
export type { ClusterInfo, StartClusterOptions } from "../../lib/testing/config.ts";
export {
  cacheDir,
  compactEtcd,
  defaultClusterDir,
  readClusterInfo,
  restartApiserver,
  startCluster,
  stateDir,
  stopCluster,
} from "../../lib/testing/lifecycle.ts";
export { issueCertificate, type IssueCertificateOptions } from "../../lib/testing/pki.ts";

import { cli } from "./cli.ts";

if (import.meta.main) {
  try {
    Deno.exit(await cli(Deno.args));
  } catch (err) {
    console.error(err instanceof Error ? err.message : err);
    Deno.exit(1);
  }
}
