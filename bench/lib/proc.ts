/**
 * Resource use of one process from /proc (Linux): resident memory (`VmRSS` of
 * `/proc/<pid>/status`) and CPU time (`utime + stime` of `/proc/<pid>/stat`, in clock ticks of
 * {@link CLOCK_TICKS_PER_SECOND}).
 *
 * @module
 */

/** USER_HZ of Linux on x86_64 and arm64 (`getconf CLK_TCK`). */
export const CLOCK_TICKS_PER_SECOND = 100;

/** A sample of one process. */
export interface ProcSample {
  /** Resident set size in bytes. */
  rssBytes: number;
  /** User plus system CPU time in seconds. */
  cpuSeconds: number;
}

/** Reads RSS and CPU time of `pid`; undefined when the process is gone. */
export function procSample(pid: number): ProcSample | undefined {
  let status: string;
  let stat: string;
  try {
    status = Deno.readTextFileSync(`/proc/${pid}/status`);
    stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  } catch {
    return undefined;
  }
  const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
  // Field 2 (comm) may hold spaces and parentheses: split after the last ")".
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // After comm: state(3) ppid(4) ... utime is field 14, stime 15 (1-based) -> indexes 11, 12.
  const ticks = Number(fields[11]) + Number(fields[12]);
  return {
    rssBytes: m ? Number(m[1]) * 1024 : 0,
    cpuSeconds: ticks / CLOCK_TICKS_PER_SECOND,
  };
}
