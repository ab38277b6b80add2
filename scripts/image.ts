/**
 * `scripts/image`: builds the `deno run` container image (the Dockerfile's `deno-run` target) on
 * this machine without any container registry, with Debian's podman and runc:
 *
 * 1. **base** (the Dockerfile's `RUNTIME_IMAGE`): a distroless-style root filesystem assembled
 *    from the Debian packages in {@linkcode DEBIAN_PACKAGES}, each pinned by version (`apt-get
 *    download`, `dpkg-deb -x`), plus what distroless adds itself: /etc/passwd and /etc/group with
 *    root, nobody and nonroot (65532), /home/nonroot, /tmp, /etc/nsswitch.conf, the CA bundle
 *    /etc/ssl/certs/ca-certificates.crt and one /var/lib/dpkg/status.d entry per package. No shell,
 *    no package manager. `podman import`ed with user 65532.
 * 2. **builder** (the Dockerfile's `DENO_IMAGE`): the base plus the pinned deno CLI (the npm
 *    package scripts/ensure-deno.sh installs) at /usr/bin/deno and, in /deno-dir-full, the npm
 *    packages of deno.lock (`deno cache --frozen main.ts` on the host), run as root.
 * 3. **image**: `podman build --target deno-run --network none --pull never` with those two as
 *    build arguments: the Dockerfile's own stages do the rest, with no network at all.
 *
 * Each image is tagged by a content hash of its inputs (package pins, this script, the deno
 * version, the Dockerfile and every file of the build context), so nothing is rebuilt when
 * nothing changed. Prints the image's size and package list; the last line is the image's tag.
 *
 * Usage: `scripts/image [--force]`. Needs podman, runc, apt-get, dpkg-deb and tar (as root).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { join } from "node:path";
import { cacheDir } from "../tests/cluster/cluster.ts";
import { type DenoInfo, reached } from "./image_app.ts";

const REPO = new URL("../", import.meta.url).pathname.replace(/\/$/, "");

/**
 * The Debian (bookworm, amd64) packages of the base, pinned by version: what distroless
 * `cc-debian12` holds for a glibc program that links only libc and libgcc_s (as the deno CLI
 * does), plus base-files/netbase/tzdata/ca-certificates. A version Debian no longer serves makes
 * the build stop with the candidate versions listed; update the pin here.
 */
export const DEBIAN_PACKAGES: Readonly<Record<string, string>> = {
  "base-files": "12.4+deb12u15",
  "ca-certificates": "20250419~deb12u2",
  // Holds libgcc-s1's copyright file (its /usr/share/doc/libgcc-s1 links there).
  "gcc-12-base": "12.2.0-14+deb12u1",
  "libc6": "2.36-9+deb12u14",
  "libgcc-s1": "12.2.0-14+deb12u1",
  "netbase": "6.4",
  "tzdata": "2026f-0+deb12u1",
};

/** uid and gid of the nonroot user (distroless `nonroot`, deploy/'s runAsUser). */
export const NONROOT_ID = 65532;

/** Repository of the images this script makes (podman's local storage only). */
export const IMAGE_REPO = "localhost/appservice-operator";

/** The podman flags every container of this project is run with here (see docs/operations.md, "Container image"). */
export const PODMAN_RUNTIME = ["--runtime", "runc"];

/**
 * rlimits set explicitly: runc fails to set them from the defaults where the process lacks
 * CAP_SYS_RESOURCE (as in this machine's sandbox). 4096 covers the operator (tens of sockets).
 */
export const PODMAN_ULIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"];

/** A tool the build needs is missing or containers cannot run here (not a product fault). */
export class ContainersUnavailable extends Error {
  override name = "ContainersUnavailable";
}

/** What {@linkcode ensureImage} made or found. */
export interface ImageResult {
  /** `localhost/appservice-operator:deno-run-<hash>`. */
  tag: string;
  /** The base image (step 1), tagged by the hash of its inputs. */
  baseTag: string;
  /** False when an image with this content hash already existed. */
  built: boolean;
  /** Wall time of this call, seconds. */
  seconds: number;
  /** Size podman reports for the image, bytes. */
  sizeBytes: number;
  /** `debian NAME VERSION`, `npm deno VERSION`, `npm NAME VERSION` lines. */
  packages: string[];
}

/** Options of {@linkcode ensureImage}. */
export interface EnsureImageOptions {
  /** Rebuild every step even when its tag exists. */
  force?: boolean;
  /** Progress lines (default: none). */
  log?: (line: string) => void;
}

const dec = new TextDecoder();

interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command; never throws for a non-zero exit (see {@linkcode must}). */
async function run(
  cmd: string,
  args: string[],
  opts: Deno.CommandOptions = {},
): Promise<RunResult> {
  try {
    const out = await new Deno.Command(cmd, {
      args,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      ...opts,
    }).output();
    return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new ContainersUnavailable(`${cmd} is not installed`);
    }
    throw err;
  }
}

/** Runs a command and returns its stdout. @throws Error with its stderr on a non-zero exit */
async function must(cmd: string, args: string[], opts: Deno.CommandOptions = {}): Promise<string> {
  const r = await run(cmd, args, opts);
  if (r.code !== 0) {
    throw new Error(`${cmd} ${args.join(" ")} exited ${r.code}: ${(r.stderr || r.stdout).trim()}`);
  }
  return r.stdout;
}

/** `podman` with the runtime this machine needs. */
export function podman(args: string[], opts: Deno.CommandOptions = {}): Promise<string> {
  return must("podman", [...PODMAN_RUNTIME, ...args], opts);
}

/** Like {@linkcode podman} but returns the exit code and output instead of throwing. */
export function podmanResult(args: string[], opts: Deno.CommandOptions = {}): Promise<RunResult> {
  return run("podman", [...PODMAN_RUNTIME, ...args], opts);
}

async function imageExists(tag: string): Promise<boolean> {
  return (await podmanResult(["image", "exists", tag])).code === 0;
}

async function sha256Hex(parts: (string | Uint8Array)[]): Promise<string> {
  const enc = new TextEncoder();
  const chunks = parts.map((p) => typeof p === "string" ? enc.encode(p) : p);
  const all = new Uint8Array(chunks.reduce((n, c) => n + c.length + 1, 0));
  let off = 0;
  for (const c of chunks) {
    all.set(c, off);
    off += c.length + 1; // a zero byte between parts
  }
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", all));
  return [...digest].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** Files below `dir` (relative to REPO), sorted. */
async function walk(dir: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(join(REPO, dir))) {
    const rel = `${dir}/${e.name}`;
    if (e.isDirectory) out.push(...await walk(rel));
    else if (e.isFile) out.push(rel);
  }
  return out.sort();
}

/**
 * The build context's files that the Dockerfile copies: what .dockerignore lets through
 * (`*` then `!path` lines, folders whole).
 */
export async function contextFiles(): Promise<string[]> {
  const ignore = await Deno.readTextFile(join(REPO, ".dockerignore"));
  const files: string[] = ["Dockerfile", ".dockerignore"];
  for (const line of ignore.split("\n")) {
    const m = /^!(.+?)\/?$/.exec(line.trim());
    if (!m) continue;
    const st = await Deno.stat(join(REPO, m[1]));
    files.push(...(st.isDirectory ? await walk(m[1]) : [m[1]]));
  }
  return files.sort();
}

/** The deno CLI the project pins (installed by scripts/ensure-deno.sh) and its version. */
async function pinnedDeno(): Promise<{ path: string; version: string }> {
  const path = (await must(join(REPO, "scripts/ensure-deno.sh"), [])).trim().split("\n").pop()!;
  const version = (await must(path, ["--version"])).split("\n")[0].split(" ")[1];
  return { path, version };
}

/**
 * Downloads the pinned .deb files into `dir` (kept there, so a rebuild downloads nothing).
 * @throws Error naming the package and Debian's candidate when a pinned version is not served
 */
async function downloadDebs(dir: string, log: (l: string) => void): Promise<string[]> {
  await Deno.mkdir(dir, { recursive: true });
  const files: string[] = [];
  let updated = false;
  const have = (name: string, version: string) =>
    [...Deno.readDirSync(dir)].map((e) => e.name).find((n) =>
      n.startsWith(`${name}_${version.replace(":", "%3a")}_`) && n.endsWith(".deb")
    );
  for (const [name, version] of Object.entries(DEBIAN_PACKAGES)) {
    const cached = have(name, version);
    if (cached) {
      files.push(join(dir, cached));
      continue;
    }
    log(`apt-get download ${name}=${version}`);
    let r = await run("apt-get", ["download", "-qq", `${name}=${version}`], { cwd: dir });
    if (r.code !== 0 && !updated) {
      log("apt-get update (package lists missing or old)");
      await run("apt-get", ["update", "-qq"]);
      updated = true;
      r = await run("apt-get", ["download", "-qq", `${name}=${version}`], { cwd: dir });
    }
    if (r.code !== 0) {
      const policy = (await run("apt-cache", ["policy", name])).stdout;
      const candidate = /Candidate: (\S+)/.exec(policy)?.[1] ?? "(none)";
      throw new Error(
        `Debian package ${name}=${version} cannot be downloaded (${r.stderr.trim()}); ` +
          `Debian's candidate is ${candidate}: update DEBIAN_PACKAGES in scripts/image.ts`,
      );
    }
    const got = have(name, version);
    if (!got) throw new Error(`apt-get download ${name}=${version} left no .deb in ${dir}`);
    files.push(join(dir, got));
  }
  return files;
}

const PASSWD = [
  "root:x:0:0:root:/root:/sbin/nologin",
  "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin",
  `nonroot:x:${NONROOT_ID}:${NONROOT_ID}:nonroot:/home/nonroot:/sbin/nologin`,
].join("\n") + "\n";
const GROUP = ["root:x:0:", "nobody:x:65534:", `nonroot:x:${NONROOT_ID}:`].join("\n") + "\n";
const NSSWITCH = [
  "passwd: files",
  "group: files",
  "shadow: files",
  "hosts: files dns",
  "networks: files",
  "protocols: files",
  "services: files",
].join("\n") + "\n";

/** Builds the root filesystem of the base in `root` from the .deb files. */
async function assembleRootfs(root: string, debs: string[]): Promise<void> {
  await Deno.remove(root, { recursive: true }).catch(() => {});
  await Deno.mkdir(join(root, "var/lib/dpkg/status.d"), { recursive: true });
  for (const deb of debs) {
    await must("dpkg-deb", ["-x", deb, root]);
    const control = await must("dpkg-deb", ["-f", deb]);
    const name = /^Package: (\S+)/m.exec(control)![1];
    await Deno.writeTextFile(join(root, "var/lib/dpkg/status.d", name), control);
  }
  // Manuals and changelogs are of no use in an image; the copyright files stay.
  for (const d of ["usr/share/man", "usr/share/info", "usr/share/lintian"]) {
    await Deno.remove(join(root, d), { recursive: true }).catch(() => {});
  }
  for await (const e of Deno.readDir(join(root, "usr/share/doc"))) {
    if (!e.isDirectory) continue;
    for await (const f of Deno.readDir(join(root, "usr/share/doc", e.name))) {
      if (f.name !== "copyright") {
        await Deno.remove(join(root, "usr/share/doc", e.name, f.name), { recursive: true });
      }
    }
  }
  await Deno.writeTextFile(join(root, "etc/passwd"), PASSWD);
  await Deno.writeTextFile(join(root, "etc/group"), GROUP);
  await Deno.writeTextFile(join(root, "etc/nsswitch.conf"), NSSWITCH);
  // The CA bundle update-ca-certificates would write: every Mozilla certificate, in name order.
  const mozilla = join(root, "usr/share/ca-certificates/mozilla");
  const certs = [...Deno.readDirSync(mozilla)].map((e) => e.name).filter((n) => n.endsWith(".crt"))
    .sort();
  await Deno.mkdir(join(root, "etc/ssl/certs"), { recursive: true });
  await Deno.writeTextFile(
    join(root, "etc/ssl/certs/ca-certificates.crt"),
    certs.map((c) => Deno.readTextFileSync(join(mozilla, c)).trimEnd() + "\n").join(""),
  );
  for (
    const [dir, mode, uid] of [["tmp", 0o1777, 0], ["root", 0o700, 0], [
      "home/nonroot",
      0o700,
      NONROOT_ID,
    ]] as const
  ) {
    await Deno.mkdir(join(root, dir), { recursive: true });
    await Deno.chmod(join(root, dir), mode);
    await Deno.chown(join(root, dir), uid, uid);
  }
}

/**
 * Makes sure the `deno run` image exists (building what is missing) and describes it.
 * @throws ContainersUnavailable when podman, runc or a Debian tool is missing
 * @throws Error when a step fails (the failing command and its output in the message)
 */
export async function ensureImage(opts: EnsureImageOptions = {}): Promise<ImageResult> {
  const t0 = performance.now();
  const log = opts.log ?? (() => {});
  const base = await ensureBase(opts);
  const deno = await pinnedDeno();
  const lock = await Deno.readFile(join(REPO, "deno.lock"));
  const builderHash = (await sha256Hex([base.hash, deno.version, lock])).slice(0, 16);
  const builderTag = `${IMAGE_REPO}-builder:${builderHash}`;
  const work = join(cacheDir(), "image");
  const fullDenoDir = join(work, `deno-dir-${(await sha256Hex([lock])).slice(0, 16)}`);

  const files = await contextFiles();
  const hash = (await sha256Hex([
    builderHash,
    ...await Promise.all(files.map(async (f) => [f, await Deno.readFile(join(REPO, f))]))
      .then((pairs) => pairs.flat()),
  ])).slice(0, 16);
  const tag = `${IMAGE_REPO}:deno-run-${hash}`;

  // npm packages the program loads (for the package list): the same rule as scripts/image_app.ts.
  const fillFullCache = async () => {
    try {
      await Deno.stat(join(fullDenoDir, ".complete"));
      return;
    } catch { /* fill it */ }
    log(`deno cache --frozen main.ts (DENO_DIR=${fullDenoDir})`);
    await must(deno.path, ["cache", "--frozen", "main.ts"], {
      cwd: REPO,
      env: { DENO_DIR: fullDenoDir, NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1" },
    });
    await Deno.writeTextFile(join(fullDenoDir, ".complete"), "");
  };
  await fillFullCache();
  const info = JSON.parse(
    await must(deno.path, ["info", "--json", "main.ts"], {
      cwd: REPO,
      env: { DENO_DIR: fullDenoDir, NO_COLOR: "1" },
    }),
  ) as DenoInfo;
  const npm = [...reached(info).closure].map((id) => info.npmPackages[id]).sort((a, b) =>
    a.name.localeCompare(b.name)
  );
  const packages = [
    ...Object.entries(DEBIAN_PACKAGES).map(([n, v]) => `debian ${n} ${v}`),
    `npm deno ${deno.version}`,
    ...npm.map((p) => `npm ${p.name} ${p.version}`),
  ];

  let built = false;
  if (opts.force || !await imageExists(tag)) {
    built = true;
    if (opts.force || !await imageExists(builderTag)) {
      const ctx = await Deno.makeTempDir({ dir: work, prefix: "builder-" });
      try {
        await Deno.link(deno.path, join(ctx, "deno")).catch(() =>
          Deno.copyFile(deno.path, join(ctx, "deno"))
        );
        await must("cp", ["-a", fullDenoDir, join(ctx, "deno-dir-full")]);
        await Deno.remove(join(ctx, "deno-dir-full/.complete"));
        await Deno.writeTextFile(
          join(ctx, "Containerfile"),
          [
            `FROM ${base.tag}`,
            "USER 0:0",
            "COPY deno /usr/bin/deno",
            "COPY deno-dir-full /deno-dir-full",
            "ENV DENO_DIR=/deno-dir-full",
          ].join("\n") + "\n",
        );
        log(`podman build ${builderTag}`);
        await podman([
          "build",
          "--pull=never",
          "--network=none",
          "--layers=false",
          "-t",
          builderTag,
          ctx,
        ]);
        await removeOlder(builderTag, log);
      } finally {
        await Deno.remove(ctx, { recursive: true });
      }
    }
    log(`podman build --target deno-run ${tag}`);
    await podman([
      "build",
      "--pull=never",
      "--network=none",
      ...PODMAN_ULIMITS,
      "--target=deno-run",
      // No cached intermediate images (the deps stage takes seconds): nothing piles up.
      "--layers=false",
      `--build-arg=DENO_IMAGE=${builderTag}`,
      `--build-arg=RUNTIME_IMAGE=${base.tag}`,
      `--label=appservice-operator.inputs=${hash}`,
      "-f",
      join(REPO, "Dockerfile"),
      "-t",
      tag,
      REPO,
    ]);
    await removeOlder(tag, log);
  }
  const sizeBytes = Number(
    (await podman(["image", "inspect", "--format", "{{.Size}}", tag])).trim(),
  );
  return {
    tag,
    baseTag: base.tag,
    built,
    seconds: (performance.now() - t0) / 1000,
    sizeBytes,
    packages,
  };
}

/**
 * Makes sure the base image (step 1) exists; returns its tag and input hash.
 * @throws ContainersUnavailable when podman or a Debian tool is missing
 */
export async function ensureBase(
  opts: EnsureImageOptions = {},
): Promise<{ tag: string; hash: string }> {
  const log = opts.log ?? (() => {});
  for (const tool of ["podman", "runc", "apt-get", "dpkg-deb", "tar"]) {
    await run(tool, ["--version"]); // ContainersUnavailable when missing
  }
  const self = await Deno.readFile(new URL(import.meta.url));
  const hash = (await sha256Hex([JSON.stringify(DEBIAN_PACKAGES), self])).slice(0, 16);
  const tag = `${IMAGE_REPO}-base:${hash}`;
  if (!opts.force && await imageExists(tag)) return { tag, hash };
  const work = join(cacheDir(), "image");
  const debs = await downloadDebs(join(work, "debs"), log);
  const root = join(work, `rootfs-${hash}`);
  const tarball = `${root}.tar`;
  try {
    log(`assembling ${root} from ${debs.length} Debian packages`);
    await assembleRootfs(root, debs);
    await must("tar", [
      "--sort=name",
      "--mtime=@0",
      "--numeric-owner",
      "-C",
      root,
      "-cf",
      tarball,
      ".",
    ]);
    log(`podman import ${tag}`);
    await podman([
      "import",
      "--change",
      `USER ${NONROOT_ID}:${NONROOT_ID}`,
      "--change",
      "WORKDIR /home/nonroot",
      "--change",
      "ENV PATH=/usr/local/bin:/usr/bin:/bin",
      "--change",
      "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
      tarball,
      tag,
    ]);
    await removeOlder(tag, log);
  } finally {
    await Deno.remove(root, { recursive: true }).catch(() => {});
    await Deno.remove(tarball).catch(() => {});
  }
  return { tag, hash };
}

/** Removes this script's older images of the same repository as `keep` (by tag). */
async function removeOlder(keep: string, log: (l: string) => void): Promise<void> {
  const repo = keep.slice(0, keep.lastIndexOf(":"));
  // Tags are `<hash>` or `<variant>-<hash>`: the same variant, another hash.
  const prefix = keep.slice(keep.lastIndexOf(":") + 1).replace(/[0-9a-f]{16}$/, "");
  const tags = (await podman(["images", "--format", "{{.Repository}}:{{.Tag}}", repo])).split("\n")
    .map((l) => l.trim()).filter((t) =>
      t && t !== keep && new RegExp(`^${prefix}[0-9a-f]{16}$`).test(t.slice(t.lastIndexOf(":") + 1))
    );
  for (const t of tags) {
    log(`podman rmi ${t} (older build)`);
    await podmanResult(["rmi", t]);
  }
}

/** Formats bytes as MB (10^6, as podman and docker print sizes). */
export const megabytes = (bytes: number) => `${(bytes / 1e6).toFixed(1)} MB`;

if (import.meta.main) {
  const { values } = parseArgs({ args: Deno.args, options: { force: { type: "boolean" } } });
  try {
    const r = await ensureImage({
      force: values.force,
      log: (l) => console.error(`image: ${l}`),
    });
    console.log(
      `${r.built ? "built" : "up to date:"} ${r.tag} in ${r.seconds.toFixed(1)} s; size ${
        megabytes(r.sizeBytes)
      }`,
    );
    console.log("packages:");
    for (const p of r.packages) console.log(`  ${p}`);
    console.log(r.tag);
  } catch (err) {
    console.error(`error: ${(err as Error).message}`);
    Deno.exit(1);
  }
}
