/**
 * Helpers for programs run beside the local control plane on this machine, shared by the e2e
 * harness (tests/e2e/harness.ts) and the benchmarks (bench/): the repository root, a free
 * loopback port, stopping a child process, the permission flags of `deno task start`, and the
 * tools this folder's build scripts build (build_helm.sh, build_prometheus.sh).
 * Nothing here knows about tests; bench/ imports this module, never tests/e2e/.
 * @module
 */

import { startFlags } from "../../scripts/compile.ts";

import { REPO } from "../../lib/testing/config.ts";

export { REPO };

/** Picks a free loopback TCP port (127.0.0.1; it may be taken by someone else before use). */
export function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

/**
 * Sends `signal` to a child (one that has exited is left alone), SIGKILL after `timeoutMs`, and resolves
 * with its exit code once `status` (the child's status, or a promise that follows it) settles.
 */
export async function stopChild(
  child: Deno.ChildProcess,
  status: Promise<Deno.CommandStatus>,
  signal: Deno.Signal,
  timeoutMs: number,
): Promise<number> {
  const kill = (sig: Deno.Signal) => {
    try {
      child.kill(sig);
    } catch { /* already gone */ }
  };
  kill(signal);
  const timer = setTimeout(() => kill("SIGKILL"), timeoutMs);
  try {
    return (await status).code;
  } finally {
    clearTimeout(timer);
  }
}

/** The flags of `deno task start`, permissions and V8 flags (the same list the binary is compiled with). */
export const startPermissionFlags: () => Promise<string[]> = startFlags;

/**
 * Runs `tests/cluster/<script>` (build_helm.sh, build_prometheus.sh: each builds a pinned tool once
 * per version into the cache, or takes the override its header names) and returns the path it
 * prints as the last line of its stdout.
 * @throws Error with the script's stderr when it fails or prints no absolute path
 */
export async function builtPath(script: string): Promise<string> {
  const out = await new Deno.Command("bash", {
    args: [`${REPO}/tests/cluster/${script}`],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const err = new TextDecoder().decode(out.stderr);
  if (!out.success) throw new Error(`${script} failed (exit ${out.code}):\n${err}`);
  const path = new TextDecoder().decode(out.stdout).trim().split("\n").pop() ?? "";
  if (!path.startsWith("/")) throw new Error(`${script} printed no path: ${err}`);
  return path;
}
