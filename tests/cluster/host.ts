/**
 * Helpers for programs run beside the local control plane on this machine, shared by the e2e
 * harness (tests/e2e/harness.ts) and the benchmarks (bench/): the repository root, a free
 * loopback port, stopping a child process, and the permission flags of `deno task start`.
 * Nothing here knows about tests; bench/ imports this module, never tests/e2e/.
 * @module
 */

import { startFlags } from "../../scripts/compile.ts";

export { REPO } from "./config.ts";

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
