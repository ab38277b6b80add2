/**
 * The Helm chart (charts/appservice-operator) and deploy/ as rendered manifests, for tests: the
 * pinned helm binary (tests/cluster/build_helm.sh), `helm template`, `kubectl kustomize`, and a
 * normal form in which the two renderings of the same object compare equal.
 *
 * @module
 */
import { parseAllDocuments } from "yaml";
import type { KubeObject } from "../../lib/kube/client.ts";
import { readClusterInfo } from "../cluster/cluster.ts";
import { ensureBinaries } from "../cluster/files.ts";
import { builtPath } from "../cluster/host.ts";
import { REPO } from "./harness.ts";

/** The chart's folder. */
export const CHART = `${REPO}/charts/appservice-operator`;

/** The namespace deploy/ installs into, and the release namespace the tests render with. */
export const OPERATOR_NAMESPACE = "appservice-system";

/** Labels Helm's templates add to every object that deploy/ has not (release bookkeeping). */
export const HELM_ONLY_LABELS = [
  "app.kubernetes.io/instance",
  "app.kubernetes.io/managed-by",
  "app.kubernetes.io/version",
  "helm.sh/chart",
];

/** Annotations the chart adds that deploy/ has not. */
export const HELM_ONLY_ANNOTATIONS = ["helm.sh/resource-policy"];

let helmPath: Promise<string> | undefined;

/**
 * The path of the pinned helm binary: build_helm.sh builds it once per version into the cache
 * (or takes `HELM_BIN`). Cached per process.
 * @throws Error with build_helm.sh's output when it fails
 */
export function helmBinary(): Promise<string> {
  helmPath ??= builtPath("build_helm.sh");
  return helmPath;
}

/** Output of a finished command run by {@link run}. */
export interface RunResult {
  /** Exit code. */
  code: number;
  stdout: string;
  stderr: string;
}

let helmHome: string | undefined;

/**
 * Runs `cmd args` with `stdin` (optional), KUBECONFIG set to the test cluster's admin kubeconfig
 * when one runs (rendering needs none), and Helm's cache, config and data folders in a temporary
 * folder of this process (never the user's); returns its exit code and output. Never throws for a
 * non-zero exit (see {@link runOk}).
 */
export async function run(cmd: string, args: string[], stdin?: string): Promise<RunResult> {
  const dir = Deno.env.get("APPSERVICE_TEST_CLUSTER_DIR");
  const info = dir ? await readClusterInfo(dir) : undefined;
  helmHome ??= await Deno.makeTempDir({ prefix: "helm-home-" });
  const child = new Deno.Command(cmd, {
    args,
    cwd: REPO,
    stdin: stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
    env: {
      KUBECONFIG: info?.kubeconfig ?? "/dev/null",
      HELM_CACHE_HOME: `${helmHome}/cache`,
      HELM_CONFIG_HOME: `${helmHome}/config`,
      HELM_DATA_HOME: `${helmHome}/data`,
    },
  }).spawn();
  if (stdin !== undefined) {
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(stdin));
    await w.close();
  }
  const out = await child.output();
  return {
    code: out.code,
    stdout: new TextDecoder().decode(out.stdout),
    stderr: new TextDecoder().decode(out.stderr),
  };
}

/** {@link run}, throwing an Error with the command and its output when it exits non-zero. */
export async function runOk(cmd: string, args: string[], stdin?: string): Promise<string> {
  const r = await run(cmd, args, stdin);
  if (r.code !== 0) {
    throw new Error(`${cmd} ${args.join(" ")} exited ${r.code}:\n${r.stderr}${r.stdout}`);
  }
  return r.stdout;
}

/** The control plane's kubectl (build.sh's bin folder; no cluster needs to run). */
export async function kubectlBinary(): Promise<string> {
  return `${await ensureBinaries()}/kubectl`;
}

/** The objects of a multi-document YAML text (empty documents dropped). */
export function parseObjects(text: string): KubeObject[] {
  return parseAllDocuments(text).map((d) => d.toJS() as KubeObject).filter((o) => o?.kind);
}

/**
 * `helm template` of the chart as release `appservice-operator` in `namespace` (default
 * appservice-system), with `--set` pairs (`key=value`, Helm's syntax); returns the YAML text.
 */
export async function helmTemplate(sets: string[] = [], namespace = OPERATOR_NAMESPACE) {
  return await runOk(await helmBinary(), [
    "template",
    "appservice-operator",
    CHART,
    "--namespace",
    namespace,
    ...sets.flatMap((s) => ["--set", s]),
  ]);
}

/** `kubectl kustomize deploy/` (or another folder of the repository); returns the YAML text. */
export async function kustomize(dir = "deploy"): Promise<string> {
  return await runOk(await kubectlBinary(), ["kustomize", `${REPO}/${dir}`]);
}

/** `kind/namespace/name` of an object: its identity in a rendering. */
export const objectKey = (o: KubeObject): string =>
  `${o.kind}/${o.metadata?.namespace ?? ""}/${o.metadata?.name ?? ""}`;

function dropKeys(map: Record<string, string> | undefined, keys: string[]) {
  if (!map) return undefined;
  for (const k of keys) delete map[k];
  return Object.keys(map).length ? map : undefined;
}

/**
 * A copy of `o` without what only Helm adds ({@link HELM_ONLY_LABELS},
 * {@link HELM_ONLY_ANNOTATIONS}), on the object and on a Pod template; empty maps removed.
 */
export function normalise(o: KubeObject): KubeObject {
  const copy = structuredClone(o) as KubeObject & {
    spec?: { template?: { metadata?: KubeObject["metadata"] } };
  };
  for (const meta of [copy.metadata, copy.spec?.template?.metadata]) {
    if (!meta) continue;
    const labels = dropKeys(meta.labels, HELM_ONLY_LABELS);
    if (labels) meta.labels = labels;
    else delete meta.labels;
    const annotations = dropKeys(meta.annotations, HELM_ONLY_ANNOTATIONS);
    if (annotations) meta.annotations = annotations;
    else delete meta.annotations;
  }
  return copy;
}

/** The objects of a rendering by {@link objectKey}, normalised. */
export function byKey(objects: KubeObject[]): Map<string, KubeObject> {
  return new Map(objects.map((o) => [objectKey(o), normalise(o)]));
}
