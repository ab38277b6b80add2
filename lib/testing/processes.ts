/**
 * The supervisor (supervisor.sh) and the components' process groups: start, wait, signal, reap.
 * @module
 */

import { join } from "node:path";
import {
  type ClusterInfo,
  type Component,
  COMPONENT_SPAWN_TIMEOUT_MS,
  KILL_WAIT_MS,
  LOG_TAIL_LINES,
  POLL_INTERVAL_MS,
  STOP_GRACE_MS,
  SUPERVISOR_SCRIPT,
  SUPERVISOR_START_TIMEOUT_MS,
  WATCHDOG,
  WATCHDOG_MAX_LIFETIME_SECONDS,
} from "./config.ts";
import { errorText, exists, sleep, withTimeout } from "./util.ts";

/** Supervisors spawned by this process, by cluster folder, so stopCluster can reap them. */
export const supervisors = new Map<string, Deno.ChildProcess>();

/** Starts supervisor.sh in its own session for cluster folder `dir`; returns its pid once it answers. */
export async function startSupervisor(dir: string): Promise<number> {
  const fromEnv = Number(Deno.env.get("APPSERVICE_CLUSTER_MAX_LIFETIME_SECONDS"));
  const maxLifetimeSeconds = Number.isFinite(fromEnv) && fromEnv > 0
    ? fromEnv
    : WATCHDOG_MAX_LIFETIME_SECONDS;
  const ownerStart = readStat(Deno.pid)?.startTicks;
  if (ownerStart === undefined) throw new Error("cannot read /proc/self/stat");
  const child = new Deno.Command("setsid", {
    args: [
      "bash",
      SUPERVISOR_SCRIPT,
      dir,
      String(Deno.pid),
      String(ownerStart),
      String(Math.max(1, Math.floor(maxLifetimeSeconds))),
    ],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  child.unref();
  supervisors.set(dir, child);
  await Deno.writeTextFile(join(dir, "run", `${WATCHDOG}.pid`), `${child.pid}\n`);
  const ready = join(dir, "run", "ready");
  const deadline = Date.now() + SUPERVISOR_START_TIMEOUT_MS;
  while (!(await exists(ready))) {
    if (!isAlive(child.pid) || Date.now() > deadline) {
      signalGroup(child.pid, "SIGKILL");
      supervisors.delete(dir);
      await withTimeout(child.status, KILL_WAIT_MS).catch(() => {});
      throw new Error(
        `watchdog (supervisor.sh) did not start\n${await logTail(dir, "supervisor")}`,
      );
    }
    await sleep(20);
  }
  return child.pid;
}

/** Asks the supervisor to start a component; returns its pid (= process group id). */
export async function startComponent(
  info: ClusterInfo,
  name: Component,
  argv: string[],
): Promise<number> {
  const run = join(info.dir, "run");
  const supervisor = info.pids[WATCHDOG];
  const pidFile = join(run, `${name}.pid`);
  await Deno.remove(pidFile).catch(() => {});
  await Deno.writeTextFile(join(run, `${name}.argv`), argv.map((a) => `${a}\0`).join(""));
  await Deno.writeTextFile(join(run, `${name}.want`), "");
  const deadline = Date.now() + COMPONENT_SPAWN_TIMEOUT_MS;
  for (let turn = 0; Date.now() < deadline; turn++) {
    const pid = await readPidFile(pidFile);
    if (pid !== undefined) {
      info.pids[name] = pid;
      return pid;
    }
    if (!isAlive(supervisor)) break;
    if (turn % 10 === 0) {
      try {
        Deno.kill(supervisor, "SIGUSR1"); // wake it; it also polls every 0.5 s
      } catch { /* raced with its exit; reported below */ }
    }
    await sleep(50);
  }
  throw new Error(
    `${name}: the watchdog did not start it within ${COMPONENT_SPAWN_TIMEOUT_MS} ms\n` +
      (await logTail(info.dir, "supervisor")),
  );
}

/**
 * Polls `check` every 100 ms until it returns true, for at most `timeoutMs`. Fails early, naming
 * the component and showing its log, when the component's process has exited.
 */
export async function waitFor(
  info: ClusterInfo,
  component: Component,
  what: string,
  timeoutMs: number,
  signal: AbortSignal | undefined,
  check: () => Promise<boolean>,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError = "";
  while (true) {
    signal?.throwIfAborted();
    const pid = info.pids[component];
    if (pid === undefined || !isAlive(pid)) {
      throw await componentError(info, component, `exited while waiting for it ${what}`);
    }
    try {
      if (await check()) return;
      lastError = "";
    } catch (err) {
      lastError = errorText(err);
    }
    if (Date.now() > deadline) {
      const why = lastError ? ` (last error: ${lastError})` : "";
      throw await componentError(info, component, `timed out after ${timeoutMs} ms ${what}${why}`);
    }
    await sleep(POLL_INTERVAL_MS);
  }
}

async function componentError(info: ClusterInfo, name: string, reason: string): Promise<Error> {
  return new Error(`${name} ${reason}\n${await logTail(info.dir, name)}`);
}

async function logTail(dir: string, name: string): Promise<string> {
  const file = join(dir, "logs", `${name}.log`);
  let text = "";
  try {
    text = await Deno.readTextFile(file);
  } catch {
    return `(no log at ${file})`;
  }
  const lines = text.trimEnd().split("\n").slice(-LOG_TAIL_LINES);
  return `--- last ${lines.length} lines of ${file} ---\n${lines.join("\n")}`;
}

interface ProcStat {
  state: string;
  ppid: number;
  pgrp: number;
  startTicks: string;
}

/** Fields of /proc/PID/stat, or undefined when there is no such process. */
function readStat(pid: number): ProcStat | undefined {
  let text: string;
  try {
    text = Deno.readTextFileSync(`/proc/${pid}/stat`);
  } catch {
    return undefined;
  }
  // The command name (field 2) may contain spaces and parentheses: split after the last ")".
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return {
    state: fields[0],
    ppid: Number(fields[1]),
    pgrp: Number(fields[2]),
    startTicks: fields[19],
  };
}

/** True when the process exists and is not a zombie. */
export function isAlive(pid: number): boolean {
  const stat = readStat(pid);
  return stat !== undefined && stat.state !== "Z";
}

/**
 * True when the command line of `pid` names the cluster folder `dir` (an argument equal to it or
 * a path inside it), which every component and the supervisor of that cluster have.
 */
export function belongsTo(pid: number, dir: string): boolean {
  let argv: string[];
  try {
    argv = Deno.readTextFileSync(`/proc/${pid}/cmdline`).split("\0");
  } catch {
    return false;
  }
  return argv.some((arg) => arg === dir || arg.includes(`${dir}/`));
}

/** Process groups among `pgids` that still have a live (non-zombie) member. */
function liveGroups(pgids: number[]): number[] {
  const wanted = new Set(pgids);
  const live = new Set<number>();
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    const stat = readStat(Number(entry.name));
    if (stat && stat.state !== "Z" && wanted.has(stat.pgrp)) live.add(stat.pgrp);
  }
  return [...live];
}

function signalGroup(pgid: number, signal: Deno.Signal): void {
  try {
    Deno.kill(-pgid, signal);
  } catch { /* group already gone */ }
}

/**
 * SIGTERM to each process group, wait up to {@linkcode STOP_GRACE_MS}, SIGKILL the rest, wait up to
 * {@linkcode KILL_WAIT_MS}. Returns the groups still alive after that (normally none).
 */
export async function terminateGroups(pgids: number[]): Promise<number[]> {
  if (pgids.length === 0) return [];
  for (const pgid of pgids) signalGroup(pgid, "SIGTERM");
  let live = await waitGroupsGone(pgids, STOP_GRACE_MS);
  if (live.length === 0) return [];
  for (const pgid of live) signalGroup(pgid, "SIGKILL");
  live = await waitGroupsGone(live, KILL_WAIT_MS);
  return live;
}

async function waitGroupsGone(pgids: number[], timeoutMs: number): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  let live = liveGroups(pgids);
  while (live.length > 0 && Date.now() < deadline) {
    await sleep(50);
    live = liveGroups(live);
  }
  return live;
}

/** The pid in `file`, or undefined when the file is missing or holds no valid pid. */
export async function readPidFile(file: string): Promise<number | undefined> {
  try {
    const pid = Number((await Deno.readTextFile(file)).trim());
    return Number.isInteger(pid) && pid > 1 ? pid : undefined;
  } catch {
    return undefined;
  }
}
