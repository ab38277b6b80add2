/**
 * Exec credential plugins (client.authentication.k8s.io, client-go
 * `plugin/pkg/client/auth/exec`): the plugin is run with stdin closed, `KUBERNETES_EXEC_INFO` and
 * the kubeconfig's `env`, killed after {@link EXEC_TIMEOUT_MS}, and its ExecCredential read: a
 * token or a client certificate and key, with an optional expiry. Caching and re-running after a
 * 401 are credentials.ts's.
 *
 * @module
 */
import type { ExecConfig } from "./config.ts";
import { ConfigError } from "./errors.ts";

/** An exec credential plugin that has not answered after this long is killed (ms). */
export const EXEC_TIMEOUT_MS = 30_000;

/** What a plugin's ExecCredential status gives: a token or a client pair, and its expiry. */
export type ExecResult =
  & { expiresAtMs: number }
  & ({ token: string; pair?: undefined } | {
    token?: undefined;
    pair: { certPem: string; keyPem: string };
  });

/**
 * Runs the plugin `exec` names and reads its ExecCredential. `inheritedEnv` (the proxy variables
 * the client took from this process's environment, proxy.ts) goes back to the plugin, which
 * inherits the rest of the environment; the kubeconfig's `env` entries come on top. A relative
 * command with a `/` is resolved against the kubeconfig's directory. Without
 * `expirationTimestamp` (or with an unreadable one) the credential does not expire.
 * @throws ConfigError naming the plugin: it could not run, timed out, exited non-zero, or printed
 *   no usable ExecCredential
 */
export async function runExecPlugin(
  exec: ExecConfig,
  inheritedEnv: Record<string, string>,
): Promise<ExecResult> {
  const command = exec.command.includes("/") && !exec.command.startsWith("/")
    ? `${exec.baseDir}/${exec.command}`
    : exec.command;
  const env: Record<string, string> = { ...inheritedEnv };
  for (const e of exec.env ?? []) env[e.name] = e.value;
  env.KUBERNETES_EXEC_INFO = JSON.stringify({
    apiVersion: exec.apiVersion,
    kind: "ExecCredential",
    spec: { interactive: false },
  });
  const out = await runBounded(command, exec.args ?? [], env, EXEC_TIMEOUT_MS);
  if (out.timedOut) {
    throw new ConfigError(
      `exec plugin ${command} gave no answer within ${EXEC_TIMEOUT_MS / 1000} s and was killed`,
    );
  }
  if (out.code !== 0) {
    const stderr = out.stderr.trim().split("\n").pop() ?? "";
    throw new ConfigError(`exec plugin ${command} exited with code ${out.code}: ${stderr}`);
  }
  return execResult(command, out.stdout);
}

/** The credential in a plugin's standard output. @throws ConfigError when there is none. */
function execResult(command: string, stdout: string): ExecResult {
  // deno-lint-ignore no-explicit-any
  let ec: any;
  try {
    ec = JSON.parse(stdout);
  } catch {
    throw new ConfigError(`exec plugin ${command} did not print an ExecCredential as JSON`);
  }
  if (ec?.kind !== "ExecCredential" || !ec.status) {
    throw new ConfigError(`exec plugin ${command} printed no ExecCredential status`);
  }
  const s = ec.status;
  const parsed = s.expirationTimestamp ? Date.parse(s.expirationTimestamp) : Infinity;
  const expiresAtMs = Number.isNaN(parsed) ? Infinity : parsed;
  if (s.token) return { token: s.token, expiresAtMs };
  if (s.clientCertificateData && s.clientKeyData) {
    return { pair: { certPem: s.clientCertificateData, keyPem: s.clientKeyData }, expiresAtMs };
  }
  throw new ConfigError(
    `exec plugin ${command}: ExecCredential status has neither token nor client certificate and key`,
  );
}

/**
 * Runs a command with stdin closed and collects stdout/stderr as text, killing it (SIGKILL) after
 * `timeoutMs`. Does not wait for pipes that a leftover grandchild keeps open once the command
 * itself has exited or been killed (a plugin script whose `sleep` outlives it).
 * @throws ConfigError when the command cannot be started.
 */
async function runBounded(
  command: string,
  args: string[],
  env: Record<string, string>,
  timeoutMs: number,
): Promise<{ code: number; stdout: string; stderr: string; timedOut: boolean }> {
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(command, {
      args,
      env,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    })
      .spawn();
  } catch (err) {
    throw new ConfigError(`exec plugin ${command} could not run: ${(err as Error).message}`);
  }
  const collect = (stream: ReadableStream<Uint8Array>) => {
    const reader = stream.getReader();
    const chunks: Uint8Array[] = [];
    const done = (async () => {
      try {
        while (true) {
          const r = await reader.read();
          if (r.done) break;
          chunks.push(r.value);
        }
      } catch { /* cancelled */ }
    })();
    return {
      done,
      cancel: () => reader.cancel().catch(() => {}),
      text: () => new TextDecoder().decode(new Uint8Array(chunks.flatMap((c) => [...c]))),
    };
  };
  const out = collect(child.stdout);
  const err = collect(child.stderr);
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    try {
      child.kill("SIGKILL");
    } catch { /* gone */ }
  }, timeoutMs);
  const status = await child.status;
  clearTimeout(timer);
  // Give the pipes a moment to drain, then stop waiting for them.
  const drained = Promise.all([out.done, err.done]);
  const grace = new Promise<void>((r) => {
    const t = setTimeout(r, 1_000);
    drained.finally(() => clearTimeout(t));
  });
  await Promise.race([drained, grace]);
  await Promise.all([out.cancel(), err.cancel()]);
  return { code: status.code, stdout: out.text(), stderr: err.text(), timedOut };
}
