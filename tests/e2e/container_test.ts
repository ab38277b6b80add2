/**
 * The operator as a container, run the way deploy/'s Deployment runs it (issue 15): the `deno run`
 * image built here by scripts/image (or reused by its content hash), started with podman and
 * runc with the Deployment's args, env, securityContext and resources read from deploy/ (see
 * tests/e2e/podman.ts), deploy/'s ServiceAccount (a TokenRequest token, the cluster CA and the
 * namespace mounted read-only where kubelet mounts them) and in-cluster configuration
 * (`KUBERNETES_SERVICE_HOST=127.0.0.1`, host networking).
 *
 * Main scenario inside the container: /healthz and /readyz answer, the example AppService becomes
 * Ready, SIGTERM (`podman stop`) ends it with exit code 0 and the Lease released, and nothing was
 * written to the root filesystem (`--read-only`, and `podman diff` is empty). The same figures
 * (start-up to /readyz, RSS at idle) are then measured for `deno task start` on the same cluster
 * and logged side by side; no assertion is made on them.
 *
 * Where containers cannot run at all (podman or runc missing, or a container that holds no code
 * of this project, the base image's dynamic loader, cannot be started), the test is ignored with
 * the reason in its name and on stdout, never passed.
 */
import { parse as parseYaml } from "yaml";
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import { LEASES } from "../../lib/kube/resources.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { FLAGS } from "../../lib/cli.ts";
import type { AppService } from "../../lib/appservice/schema.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  ContainersUnavailable,
  ensureBase,
  ensureImage,
  megabytes,
  podman,
  PODMAN_ULIMITS,
  podmanResult,
} from "../../scripts/image.ts";
import {
  admin,
  cluster,
  dropNamespace,
  freePort,
  getAs,
  installCrd,
  newNamespace,
  REPO,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";
import { applyDeployRbac, mintToken, writeTokenKubeconfig } from "./resources.ts";
import { podmanRunArgs, probePort, readDeployment, rewriteBindPorts } from "./podman.ts";

/** Settle time after Ready before RSS is read ("at idle"), ms. */
const IDLE_SETTLE_MS = 5_000;
/**
 * Files podman itself bind-mounts into every container (podman-run(1): /etc/hosts,
 * /etc/resolv.conf, /etc/hostname, /run/.containerenv), as kubelet does the first three.
 */
const PODMAN_MOUNT_POINTS = [
  "/etc/hosts",
  "/etc/resolv.conf",
  "/etc/hostname",
  "/run/.containerenv",
];
/** How often the start-up wait asks podman whether the container still runs, ms. */
const ALIVE_CHECK_INTERVAL_MS = 1_000;
/** Poll interval of the start-up measurement (both variants), ms. */
const STARTUP_POLL_MS = 50;

/**
 * Why the container test is skipped, or undefined: podman or runc is not installed. Asks only
 * `--version` of each (no image is built when the module loads, e.g. in a filtered run of other
 * tests); whether containers really run is the test's first check ({@link containerSupport}).
 */
async function missingTools(): Promise<string | undefined> {
  for (const cmd of ["podman", "runc"]) {
    try {
      await new Deno.Command(cmd, { args: ["--version"], stdout: "null", stderr: "null" })
        .output();
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) {
        return `${cmd} is not installed (.ci/run installs podman and runc from Debian)`;
      }
      throw err;
    }
  }
  return undefined;
}

/**
 * Whether containers can run here at all, asked of a container that holds no code of this
 * project: the base image's dynamic loader (`ld.so --version`) with the same security flags
 * (builds the base image when it is not there yet).
 * Returns why they cannot, or the error building the base.
 */
async function containerSupport(): Promise<{ skip?: string; error?: Error }> {
  try {
    const base = await ensureBase();
    const r = await podmanResult([
      "run",
      "--rm",
      "--pull=never",
      "--network=host",
      "--read-only",
      "--cap-drop=ALL",
      "--security-opt=no-new-privileges",
      "--user=65532:65532",
      ...PODMAN_ULIMITS,
      base.tag,
      "/lib64/ld-linux-x86-64.so.2",
      "--version",
    ]);
    if (r.code !== 0) {
      return { skip: `containers cannot run here: ${(r.stderr || r.stdout).trim().slice(-400)}` };
    }
    return {};
  } catch (err) {
    if (err instanceof ContainersUnavailable) {
      return { skip: `${err.message} (.ci/run installs podman and runc from Debian)` };
    }
    return { error: err as Error };
  }
}

const support = { skip: await missingTools() };
if (support.skip) console.log(`container test skipped: ${support.skip}`);

/** VmRSS of a process, bytes (from /proc/PID/status). */
function rssBytes(pid: number): number {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)![1]) * 1024;
}

/** Polls `url` until it answers 200; returns the time from `t0` (performance.now()) in ms. */
async function untilOk(url: string, t0: number, alive: () => Promise<void>): Promise<number> {
  return await waitFor(
    `${url} 200`,
    async () => {
      await alive();
      try {
        const r = await fetch(url);
        await r.body?.cancel();
        return r.status === 200 ? performance.now() - t0 : undefined;
      } catch {
        return undefined;
      }
    },
    60_000,
    STARTUP_POLL_MS,
  );
}

/** The value of `--name=V` or `--name V` in args, else the flag's default. */
function flagValue(args: string[], name: string): string {
  for (let i = 0; i < args.length; i++) {
    if (args[i].startsWith(`--${name}=`)) return args[i].slice(name.length + 3);
    if (args[i] === `--${name}`) return args[i + 1];
  }
  return FLAGS.find((f) => f.name === name)?.default ?? "";
}

Deno.test({
  name: support.skip
    ? `container: deploy/'s Deployment run with podman (skipped: ${support.skip})`
    : "container: deploy/'s Deployment run with podman: Ready, probes, SIGTERM exit 0, Lease released, read-only root untouched",
  ignore: support.skip !== undefined,
  fn: async (t) => {
    // With podman and runc installed, containers that cannot run are a failure, not a skip.
    const runs = await containerSupport();
    if (runs.error) throw runs.error;
    if (runs.skip) throw new Error(runs.skip);
    const image = await ensureImage({ log: (l) => console.log(`image: ${l}`) });
    console.log(
      `image ${image.tag}: ${image.built ? "built" : "reused (same content hash)"} in ${
        image.seconds.toFixed(1)
      } s, size ${megabytes(image.sizeBytes)}; packages: ${image.packages.join(", ")}`,
    );
    const inspect = JSON.parse(await podman(["image", "inspect", image.tag]))[0].Config;
    assertEquals(inspect.User, "65532:65532");

    await installCrd();
    const c = await admin();
    const info = await cluster();
    await applyDeployRbac(c, REPO);
    const { deployment, pod, container } = readDeployment(
      await Deno.readTextFile(`${REPO}/deploy/deployment.yaml`),
    );
    const saNamespace = deployment.metadata!.namespace!;
    const saName = pod.serviceAccountName!;
    const saUser = `system:serviceaccount:${saNamespace}:${saName}`;
    const rewritten = rewriteBindPorts(container.args ?? [], freePort);
    const healthPort = probePort(
      container,
      container.readinessProbe!.httpGet!.port,
      rewritten.ports,
    );
    const livePort = probePort(container, container.livenessProbe!.httpGet!.port, rewritten.ports);
    const readyUrl = `http://127.0.0.1:${healthPort}${container.readinessProbe!.httpGet!.path}`;
    const liveUrl = `http://127.0.0.1:${livePort}${container.livenessProbe!.httpGet!.path}`;
    const leaseName = flagValue(rewritten.args, "leader-election-id");
    const leaseNs = flagValue(rewritten.args, "leader-election-namespace") || saNamespace;
    const getLease = () => c.get<Lease>(LEASES, leaseName, { namespace: leaseNs });

    // What kubelet projects into the ServiceAccount volume (files 0644, as its defaultMode).
    const token = await mintToken(c, saNamespace, saName, 3600);
    const saDir = await Deno.makeTempDir({ prefix: "container-sa-" });
    await Deno.chmod(saDir, 0o755);
    await Deno.writeTextFile(`${saDir}/token`, token, { mode: 0o644 });
    await Deno.copyFile(info.caCertFile, `${saDir}/ca.crt`);
    await Deno.chmod(`${saDir}/ca.crt`, 0o644);
    await Deno.writeTextFile(`${saDir}/namespace`, saNamespace, { mode: 0o644 });

    const example = parseYaml(
      await Deno.readTextFile(`${REPO}/examples/appservice.yaml`),
    ) as AppService;
    const ns = await newNamespace("container");
    example.metadata.namespace = ns;
    try {
      const name = `appservice-e2e-${crypto.randomUUID().slice(0, 8)}`;
      const runArgs = podmanRunArgs(pod, container, {
        name,
        image: image.tag,
        serviceAccountDir: saDir,
        apiserverPort: Number(new URL(info.server).port),
        args: rewritten.args,
      });
      console.log(`podman ${runArgs.join(" ")}`);
      const logs = async () => {
        const r = await podmanResult(["logs", name]);
        return r.stdout + r.stderr;
      };
      // At most once a second: a podman process per poll would compete with the start-up measured.
      let checkedAt = performance.now();
      const alive = async () => {
        if (performance.now() - checkedAt < ALIVE_CHECK_INTERVAL_MS) return;
        checkedAt = performance.now();
        const st = (await podmanResult(["inspect", "--format", "{{.State.Status}}", name])).stdout
          .trim();
        if (st !== "running") throw new Error(`container ${st}: ${(await logs()).slice(-3000)}`);
      };
      const figures: Record<string, string> = {};
      let stopped = false;
      try {
        const t0 = performance.now();
        await podman(runArgs);
        const readyMs = await untilOk(readyUrl, t0, alive);
        figures.container = `start-up to /readyz ${readyMs.toFixed(0)} ms`;

        await t.step("/healthz and /readyz answer 200", async () => {
          for (const url of [liveUrl, readyUrl]) {
            const r = await fetch(url);
            assertEquals(r.status, 200, `${url}: ${await r.text()}`);
          }
        });

        await t.step(
          "in-cluster configuration: the ServiceAccount's token, CA, namespace",
          async () => {
            const connected = (await logs()).split("\n").filter((l) => l.startsWith("{"))
              .map((l) => JSON.parse(l)).find((l) => l.message === "Connected");
            assertEquals(connected?.properties?.user, saUser);
          },
        );

        await t.step("the example AppService becomes Ready; the Lease is held", async () => {
          await c.create(APPSERVICES as never, example as unknown as KubeObject);
          const want = example.spec.replicas ?? 1;
          await waitFor("example Ready", async () => {
            const a = await getAs(ns, example.metadata.name!);
            return a.status?.ready === true && a.status.readyReplicas === want;
          }, 60_000);
          const lease = await getLease();
          assert(lease.spec?.holderIdentity, "the Lease has a holder while the container runs");
        });

        await sleep(IDLE_SETTLE_MS);
        const pid = Number(
          (await podman(["inspect", "--format", "{{.State.Pid}}", name])).trim(),
        );
        figures.container += `, RSS at idle ${megabytes(rssBytes(pid))}`;

        await t.step("SIGTERM: exit code 0, the Lease released", async () => {
          const grace = pod.terminationGracePeriodSeconds ?? 30;
          const s0 = performance.now();
          await podman(["stop", `--time=${grace}`, name]); // SIGTERM, SIGKILL after the grace
          stopped = true;
          const exit = (await podman(["inspect", "--format", "{{.State.ExitCode}}", name])).trim();
          assertEquals(exit, "0", (await logs()).slice(-3000));
          figures.container += `, stopped in ${(performance.now() - s0).toFixed(0)} ms`;
          const lease = await getLease();
          assert(!lease.spec?.holderIdentity, `Lease still held by ${lease.spec?.holderIdentity}`);
        });

        await t.step("nothing written to the root filesystem", async () => {
          // The runtime creates mount points (and their parents) before the root becomes
          // read-only: those, and only those, may show up.
          const mounts = JSON.parse(await podman(["inspect", name]))[0].Mounts as {
            Destination: string;
          }[];
          const allowed = new Set<string>();
          for (const m of [...mounts.map((m) => m.Destination), ...PODMAN_MOUNT_POINTS]) {
            for (let p = m; p !== "/"; p = p.slice(0, p.lastIndexOf("/")) || "/") allowed.add(p);
          }
          const diff = JSON.parse(
            (await podman(["diff", "--format=json", name])).trim() || "{}",
          ) as Record<string, string[]>;
          const written = Object.entries(diff).flatMap(([k, paths]) =>
            paths.filter((p) => !allowed.has(p)).map((p) => `${k} ${p}`)
          );
          assertEquals(written, [], JSON.stringify(diff));
          // Nothing the runtime could not write either (a read-only DENO_DIR is expected to work).
          const text = await logs();
          assert(!/read-only file system|os error 30/i.test(text), text.slice(-3000));
        });
      } finally {
        if (!stopped) console.log((await logs()).slice(-5000));
        await podmanResult(["rm", "--force", "--time=0", name]);
        await Deno.remove(saDir, { recursive: true });
      }

      // The same figures for `deno task start` (same flags, same cluster, same ServiceAccount, the
      // example still there), measured the same way. Figures only, so outside the steps.
      {
        const dir = await Deno.makeTempDir({ prefix: "container-cmp-" });
        const kubeconfig = `${dir}/kubeconfig`;
        await writeTokenKubeconfig(kubeconfig, info.server, info.caCertFile, token, saNamespace);
        // The harness binds the probes and metrics to free loopback ports itself.
        const hostArgs = (container.args ?? []).filter((a, i, all) =>
          !/^--[a-z0-9-]*bind-address/.test(a) && !/^--[a-z0-9-]*bind-address$/.test(all[i - 1])
        );
        const t0 = performance.now();
        const op = await startOperator([`--kubeconfig=${kubeconfig}`, ...hostArgs]);
        try {
          const readyMs = await untilOk(
            `http://127.0.0.1:${op.healthPort}/readyz`,
            t0,
            () => Promise.resolve(),
          );
          await waitFor("Lease held by deno task start", async () => {
            return (await getLease()).spec?.holderIdentity ? true : undefined;
          }, 60_000);
          await sleep(IDLE_SETTLE_MS);
          figures["deno task start"] = `start-up to /readyz ${readyMs.toFixed(0)} ms, RSS at idle ${
            megabytes(rssBytes(op.child.pid))
          }`;
          // Deleted while an operator runs, so no AppService is left for a later test's operator
          // to reconcile in a terminating namespace.
          await c.delete(APPSERVICES as never, example.metadata.name!, { namespace: ns });
          await waitFor("example deleted", async () => {
            try {
              await getAs(ns, example.metadata.name!);
              return false;
            } catch (err) {
              return isNotFound(err);
            }
          }, 60_000);
        } finally {
          assertEquals(await op.stop(), 0);
          await Deno.remove(dir, { recursive: true });
        }
      }
      for (const [k, v] of Object.entries(figures)) console.log(`figures: ${k}: ${v}`);
    } finally {
      await dropNamespace(ns);
      // Leave no Lease behind: a later test (rbac_test) sees its own operator create it.
      await c.delete(LEASES, leaseName, { namespace: leaseNs }).catch((err) => {
        if (!isNotFound(err)) throw err;
      });
    }
  },
});
