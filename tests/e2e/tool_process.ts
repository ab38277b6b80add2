/**
 * A tool the end-to-end tests run beside the operator (Prometheus, the OpenTelemetry Collector):
 * started with its output collected, and stopped.
 *
 * @module
 */
import { stopChild } from "../cluster/host.ts";

/** A running tool started by {@link spawnTool}. */
export interface ToolProcess {
  /** Its stdout and stderr so far, interleaved as they came. */
  logs(): string;
  /** Whether it has exited. */
  exited(): boolean;
  /** SIGTERM, SIGKILL after 30 s; resolves with the exit code. */
  stop(): Promise<number>;
}

/** Starts `command args` with no stdin, collecting its stdout and stderr. */
export function spawnTool(command: string, args: string[]): ToolProcess {
  const child = new Deno.Command(command, {
    args,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let logs = "";
  const dec = new TextDecoder();
  const pump = async (s: ReadableStream<Uint8Array>) => {
    for await (const chunk of s) logs += dec.decode(chunk, { stream: true });
  };
  const pumps = Promise.all([pump(child.stdout), pump(child.stderr)]);
  const status = child.status.then(async (s) => {
    await pumps;
    return s;
  });
  let exited = false;
  status.then(() => exited = true);
  return {
    logs: () => logs,
    exited: () => exited,
    stop: () => stopChild(child, status, "SIGTERM", 30_000),
  };
}
