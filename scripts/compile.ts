/**
 * `deno task compile`: builds the standalone binary `dist/appservice-operator` with `deno compile`
 * and exactly the permission and V8 flags of `deno task start` (read from deno.json, so the
 * binary, the tests and `deno task start` can never drift apart).
 *
 * `deno compile` needs Deno's base runtime (denort) of the same version. It honours `DENORT_BIN`;
 * without it, deno downloads denort from Deno's own download host. Where neither works, this stops
 * with one line saying so. The result is smoke-tested (`--version`) before it is reported.
 *
 * Usage: `deno task compile [--output PATH] [--target TRIPLE]`
 *
 * @module
 */
import { parseArgs } from "node:util";

const REPO = new URL("../", import.meta.url).pathname.replace(/\/$/, "");

/**
 * The flags of `deno task start`: permissions (`--allow-*`, `--deny-*`) and V8 settings
 * (`--v8-flags=...`, the young generation's size: see BENCHMARKS.md, memory section). The one
 * list that the binary (`deno compile` embeds V8 flags), the image, the demo, the benchmark and
 * the tests all run with.
 */
export async function startFlags(): Promise<string[]> {
  const deno = JSON.parse(await Deno.readTextFile(`${REPO}/deno.json`));
  return String(deno.tasks.start).split(/\s+/).filter((w) =>
    w.startsWith("--allow-") || w.startsWith("--deny-") || w.startsWith("--v8-flags=")
  );
}

function fail(msg: string): never {
  console.error(`error: ${msg}`);
  // Leave no empty dist/ behind.
  try {
    Deno.removeSync(`${REPO}/dist`);
  } catch { /* not empty, or absent */ }
  Deno.exit(1);
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      output: { type: "string", default: `${REPO}/dist/appservice-operator` },
      target: { type: "string" },
    },
  });
  const denort = Deno.env.get("DENORT_BIN");
  if (denort) {
    try {
      const st = Deno.statSync(denort);
      if (!st.isFile) fail(`DENORT_BIN=${denort} is not a file`);
    } catch {
      fail(`DENORT_BIN=${denort} does not exist`);
    }
  }
  // deno compile (2.8 and 2.9) overflows its stack on the 2 MB test fixtures that the npm package
  // bintrees (a dependency of prom-client's tdigest) ships; they are never loaded, so leave them out.
  const info = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json"],
    stdout: "piped",
    stderr: "null",
  }).output();
  const npmCache = JSON.parse(new TextDecoder().decode(info.stdout)).npmCache as string;
  const excludes = [`${npmCache}/registry.npmjs.org/bintrees/1.0.2/test`];
  const args = [
    "compile",
    ...(await startFlags()),
    ...excludes.flatMap((e) => ["--exclude", e]),
    "--no-check",
    "--output",
    values.output!,
    ...(values.target ? ["--target", values.target] : []),
    `${REPO}/main.ts`,
  ];
  console.log(`deno ${args.join(" ")}`);
  const out = await new Deno.Command(Deno.execPath(), {
    args,
    cwd: REPO,
    stdout: "inherit",
    stderr: "piped",
  }).output();
  const stderr = new TextDecoder().decode(out.stderr);
  if (!out.success) {
    if (!denort && /denort|Download|download/.test(stderr)) {
      fail(
        `deno compile needs Deno's base runtime (denort ${Deno.version.deno} for ${Deno.build.target}), ` +
          `which it downloads from Deno's download host, and that failed here; set DENORT_BIN to a ` +
          `denort binary of the same version`,
      );
    }
    console.error(stderr);
    fail("deno compile failed");
  }
  // Smoke test: a base runtime that is not denort (e.g. the full deno CLI) yields a file that
  // does not run the embedded program.
  const probe = await new Deno.Command(values.output!, {
    args: ["--version"],
    stdout: "piped",
    stderr: "piped",
  }).output().catch((err) => fail(`cannot run ${values.output}: ${err.message}`));
  const text = new TextDecoder().decode(probe.stdout);
  if (!probe.success || !text.startsWith("appservice-operator ")) {
    await Deno.remove(values.output!).catch(() => {});
    fail(
      `${values.output} does not run the operator (is DENORT_BIN=${
        denort ?? "(unset)"
      } the denort of ` +
        `Deno ${Deno.version.deno}?)`,
    );
  }
  console.log(`built ${values.output}: ${text.trim()}`);
}
