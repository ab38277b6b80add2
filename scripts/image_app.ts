/**
 * Lays out the program of the `deno run` container image (the Dockerfile's `deno-run` target):
 * run inside the image build's `deps` stage, with only the deno CLI (no shell), as
 *
 * ```sh
 * deno run -A scripts/image_app.ts --src /src --app /app --deno-dir /deno-dir
 * ```
 *
 * 1. `deno cache --frozen main.ts` in `--src` (the repository's files), with the lockfile honoured
 *    (`--frozen`: nothing is resolved anew). The npm packages come from `$DENO_DIR`: downloaded
 *    where the npm registry is reachable, or already there (scripts/image fills it on the host).
 * 2. `deno info --json main.ts`: the modules `main.ts` reaches, and the npm packages it loads with
 *    their dependencies (the closure).
 * 3. `--app`: `main.ts` and every local module it reaches (same relative paths), `deno.json` with
 *    only the imports the program uses, and `deno.lock` with only the packages of that closure
 *    (their integrity hashes unchanged). Deno installs every npm package named in deno.json's
 *    imports when a program starts, so without this the image would carry the test and benchmark
 *    dependencies too (about 85 MB, mostly `@kubernetes/client-node`).
 * 4. `--deno-dir`: a fresh DENO_DIR holding only those npm packages (copied from `$DENO_DIR`), then
 *    `deno cache --frozen --cached-only <app>/main.ts` in it: proves the trimmed config and lockfile
 *    agree and that nothing needs the network, and stores the transpiled modules under the paths
 *    the container runs them from.
 *
 * Exit code 1 with one `error:` line when a step fails.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

/** The parts of deno.json this script reads and rewrites. */
export interface DenoConfig {
  imports?: Record<string, string>;
  [key: string]: unknown;
}

/** The parts of a deno.lock (version 5) this script reads and rewrites. */
export interface DenoLock {
  version: string;
  specifiers?: Record<string, string>;
  npm?: Record<string, { integrity?: string; dependencies?: string[]; [k: string]: unknown }>;
  workspace?: { dependencies?: string[]; [k: string]: unknown };
  [key: string]: unknown;
}

/**
 * The npm package name of an `npm:` specifier (`npm:yaml@2.9.1`, `npm:/kubernetes-types@1.30.0/`,
 * `npm:@scope/name@1`), or undefined for any other specifier.
 */
export function npmName(specifier: string): string | undefined {
  const m = /^npm:\/?((?:@[^/@]+\/)?[^/@]+)/.exec(specifier);
  return m?.[1];
}

/**
 * The name of a lockfile package id (`yaml@2.9.1`, `@scope/name@1.0.0_peer@2.0.0`).
 */
export function lockPackageName(id: string): string {
  return id.slice(0, id.indexOf("@", 1));
}

/**
 * Trims deno.json and deno.lock to the npm packages a program loads.
 * @param config deno.json as parsed
 * @param lock deno.lock as parsed (version 5)
 * @param roots names of the npm packages the program imports itself
 * @param closure lockfile ids (`name@version[_peer...]`) of those packages and all their
 *   dependencies
 * @returns copies with the imports, `specifiers`, `npm` entries and `workspace.dependencies` of
 *   other packages left out; everything else (integrity hashes included) unchanged
 * @throws Error when the lockfile is not version 5 (the format this was written for)
 */
export function trimConfig(
  config: DenoConfig,
  lock: DenoLock,
  roots: ReadonlySet<string>,
  closure: ReadonlySet<string>,
): { config: DenoConfig; lock: DenoLock } {
  if (lock.version !== "5") throw new Error(`deno.lock version ${lock.version}, expected 5`);
  const keepSpec = (s: string) => {
    const name = npmName(s);
    return name === undefined || roots.has(name);
  };
  const imports = Object.fromEntries(
    Object.entries(config.imports ?? {}).filter(([, v]) => keepSpec(v)),
  );
  const out: DenoLock = { ...lock };
  if (lock.specifiers) {
    out.specifiers = Object.fromEntries(
      Object.entries(lock.specifiers).filter(([k]) => keepSpec(k)),
    );
  }
  if (lock.npm) {
    out.npm = Object.fromEntries(Object.entries(lock.npm).filter(([k]) => closure.has(k)));
  }
  if (lock.workspace) {
    out.workspace = {
      ...lock.workspace,
      dependencies: (lock.workspace.dependencies ?? []).filter(keepSpec),
    };
  }
  return { config: { ...config, imports }, lock: out };
}

/** What `deno info --json` says about a program (the fields used here). */
export interface DenoInfo {
  modules: { specifier: string; kind?: string; npmPackage?: string; local?: string }[];
  npmPackages: Record<string, { name: string; version: string; dependencies?: string[] }>;
}

/**
 * From `deno info --json`: the local files a program reaches, the names of the npm packages it
 * imports itself, and the lockfile ids of those packages with all their dependencies.
 */
export function reached(info: DenoInfo): {
  files: string[];
  roots: Set<string>;
  closure: Set<string>;
} {
  const files: string[] = [];
  const rootIds: string[] = [];
  for (const m of info.modules) {
    if (m.specifier.startsWith("file://")) files.push(fileURLToPath(m.specifier));
    if (m.kind === "npm" && m.npmPackage) rootIds.push(m.npmPackage);
  }
  const closure = new Set<string>();
  for (let stack = [...rootIds]; stack.length > 0;) {
    const id = stack.pop()!;
    if (closure.has(id)) continue;
    closure.add(id);
    stack = stack.concat(info.npmPackages[id]?.dependencies ?? []);
  }
  const roots = new Set(rootIds.map((id) => info.npmPackages[id]?.name ?? lockPackageName(id)));
  return { files, roots, closure };
}

function fail(msg: string): never {
  console.error(`error: ${msg}`);
  Deno.exit(1);
}

async function deno(args: string[], cwd: string, env: Record<string, string>): Promise<string> {
  const out = await new Deno.Command(Deno.execPath(), {
    args,
    cwd,
    env: { NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1", ...env },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  if (!out.success) {
    fail(`deno ${args.join(" ")} (in ${cwd}) failed:\n${dec.decode(out.stderr)}`);
  }
  return dec.decode(out.stdout);
}

async function copyTree(from: string, to: string): Promise<void> {
  await Deno.mkdir(to, { recursive: true });
  for await (const e of Deno.readDir(from)) {
    const a = join(from, e.name);
    const b = join(to, e.name);
    if (e.isDirectory) await copyTree(a, b);
    else if (e.isFile) await Deno.copyFile(a, b);
    else if (e.isSymlink) await Deno.symlink(await Deno.readLink(a), b);
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      src: { type: "string", default: "." },
      app: { type: "string" },
      "deno-dir": { type: "string" },
    },
  });
  const src = values.src!;
  const app = values.app ?? fail("--app is required");
  const denoDir = values["deno-dir"] ?? fail("--deno-dir is required");
  const fullDir = Deno.env.get("DENO_DIR") ?? fail("DENO_DIR (the full npm cache) is not set");

  await deno(["cache", "--frozen", "main.ts"], src, { DENO_DIR: fullDir });
  const info = JSON.parse(
    await deno(["info", "--json", "main.ts"], src, { DENO_DIR: fullDir }),
  ) as DenoInfo;
  const { files, roots, closure } = reached(info);

  const srcAbs = await Deno.realPath(src);
  for (const f of files) {
    const rel = relative(srcAbs, f);
    if (rel.startsWith("..")) fail(`${f} is outside ${srcAbs}`);
    if (rel === "deno.json") continue; // written trimmed below
    await Deno.mkdir(join(app, dirname(rel)), { recursive: true });
    await Deno.copyFile(f, join(app, rel));
  }
  const trimmed = trimConfig(
    JSON.parse(await Deno.readTextFile(join(src, "deno.json"))),
    JSON.parse(await Deno.readTextFile(join(src, "deno.lock"))),
    roots,
    closure,
  );
  await Deno.writeTextFile(join(app, "deno.json"), JSON.stringify(trimmed.config, null, 2) + "\n");
  await Deno.writeTextFile(join(app, "deno.lock"), JSON.stringify(trimmed.lock, null, 2) + "\n");

  // npm packages live in <DENO_DIR>/npm/<registry host>/<name>/<version>/ (plus the name's
  // registry.json); copy the closure's names whole.
  const names = new Set([...closure].map(lockPackageName));
  const npmRoot = join(fullDir, "npm");
  for await (const host of Deno.readDir(npmRoot)) {
    if (!host.isDirectory) continue;
    for (const name of names) {
      const from = join(npmRoot, host.name, name);
      try {
        await Deno.stat(from);
      } catch {
        continue;
      }
      await copyTree(from, join(denoDir, "npm", host.name, name));
    }
  }
  await deno(["cache", "--frozen", "main.ts"], app, { DENO_DIR: denoDir });
  console.log(
    `${app}: ${files.length} modules; npm packages: ${[...closure].sort().join(", ")}`,
  );
}
