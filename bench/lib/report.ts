/**
 * BENCHMARKS.md: each benchmark owns one section between marker comments and rewrites only that
 * section, so `deno task bench` and `deno task bench:watch` can run in any order.
 *
 * @module
 */
import { join } from "node:path";
import { REPO } from "../../tests/cluster/host.ts";

/** Path of BENCHMARKS.md. */
export const BENCHMARKS_MD: string = join(REPO, "BENCHMARKS.md");

const HEADER = `# Benchmarks

appservice-operator (TypeScript on Deno) side by side with a peer: the same AppService design in
Go with controller-runtime (bench/peer), on the same local control plane (tests/cluster), in one
run. The sections below are written by the benchmarks themselves; each names the command that
produced it. Raw results (JSON), operator logs and plots go to bench/results/ (not committed).
Ratios are ours / peer: below 1 means ours used less (time, requests, memory, CPU);
for rates and shares of the ceiling, above 1 means ours did more.

`;

/** README.md, whose benchmark summary `deno task bench` rewrites (section `bench:summary`). */
export const README_MD: string = join(REPO, "README.md");

/**
 * Replaces the section `name` (between `<!-- name:begin -->` and `<!-- name:end -->`) of `file`
 * (default BENCHMARKS.md) with `body`. A section BENCHMARKS.md lacks is appended (the file is
 * created with its header when missing); in any other file a missing section is left out and
 * false returned. The file is then formatted with `deno fmt` (it aligns Markdown tables).
 */
export async function writeSection(
  name: string,
  body: string,
  file: string = BENCHMARKS_MD,
): Promise<boolean> {
  const begin = `<!-- ${name}:begin -->`;
  const end = `<!-- ${name}:end -->`;
  let text = file === BENCHMARKS_MD ? HEADER : "";
  try {
    text = await Deno.readTextFile(file);
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
  const block = `${begin}\n${body.trim()}\n${end}`;
  const i = text.indexOf(begin), j = text.indexOf(end);
  if (i >= 0 && j > i) text = text.slice(0, i) + block + text.slice(j + end.length);
  else if (file === BENCHMARKS_MD) text = `${text.trimEnd()}\n\n${block}\n`;
  else return false;
  await Deno.writeTextFile(file, text.trimEnd() + "\n");
  // Keep `deno fmt --check` clean (it aligns Markdown tables).
  await new Deno.Command(Deno.execPath(), {
    args: ["fmt", "--quiet", file],
    cwd: REPO,
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).output().catch(() => {});
  return true;
}

/** A Markdown table. */
export function table(head: string[], rows: (string | number)[][]): string {
  const line = (cells: (string | number)[]) => `| ${cells.join(" | ")} |`;
  return [line(head), line(head.map(() => "---")), ...rows.map(line)].join("\n");
}

/** `x` with `digits` decimals, or "–" when not a finite number. */
export function fmt(x: number | undefined | null, digits = 1): string {
  return typeof x === "number" && Number.isFinite(x) ? x.toFixed(digits) : "–";
}

/**
 * The median of `xs` with its range, e.g. `19.5 (18.1–26.5)`, each with `digits` decimals; one
 * value alone without a range; "–" for none.
 */
export function spread(xs: number[], digits = 1): string {
  if (xs.length === 0) return "–";
  if (xs.length === 1) return fmt(xs[0], digits);
  return `${fmt(median(xs), digits)} (${fmt(Math.min(...xs), digits)}–${
    fmt(Math.max(...xs), digits)
  })`;
}

/** ours / peer with two decimals, or "–". */
export function ratio(ours: number | undefined | null, peer: number | undefined | null): string {
  if (typeof ours !== "number" || typeof peer !== "number") return "–";
  if (!Number.isFinite(ours) || !Number.isFinite(peer)) return "–";
  if (peer === 0) return ours === 0 ? "1.00" : "∞";
  return (ours / peer).toFixed(2);
}

/** What the machine was doing: cores, memory, load averages now. */
export function machineLine(): string {
  let load = "?";
  let memGiB = "?";
  try {
    load = Deno.readTextFileSync("/proc/loadavg").split(" ").slice(0, 3).join(" ");
    const m = /^MemTotal:\s+(\d+)/m.exec(Deno.readTextFileSync("/proc/meminfo"));
    if (m) memGiB = (Number(m[1]) / 1024 / 1024).toFixed(0);
  } catch { /* not Linux */ }
  return `${navigator.hardwareConcurrency} cores, ${memGiB} GiB, load average ${load}`;
}

/** Load averages (1, 5, 15 min) now. */
export function loadAverage(): number[] {
  try {
    return Deno.readTextFileSync("/proc/loadavg").split(" ").slice(0, 3).map(Number);
  } catch {
    return [];
  }
}

/** The median of `xs` (the mean of the two middle values for an even count). */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}
