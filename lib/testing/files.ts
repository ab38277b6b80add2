/**
 * Binaries (build.sh), free ports, the cluster folder and the config files written into it.
 * @module
 */

import { dirname, join } from "node:path";
import {
  BUILD_SCRIPT,
  type ClusterInfo,
  CONTEXT_NAME,
  KWOK_STAGES_FILE,
  LOG_TAIL_LINES,
} from "./config.ts";
import { CLIENT_CERTS } from "./pki.ts";

/**
 * Runs build.sh for `names` (default all six binaries; see build.sh) and returns the bin folder
 * (its last stdout line); streams build progress.
 * @throws Error with the end of build.sh's output when it fails, or when aborted by `signal`.
 */
export async function ensureBinaries(signal?: AbortSignal, names: string[] = []): Promise<string> {
  const child = new Deno.Command("bash", {
    args: [BUILD_SCRIPT, ...names],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const onAbort = () => {
    try {
      child.kill("SIGTERM");
    } catch { /* already gone */ }
  };
  signal?.addEventListener("abort", onAbort, { once: true });
  const stderrLines: string[] = [];
  const pump = (async () => {
    let pending = "";
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
      pending += chunk;
      const lines = pending.split("\n");
      pending = lines.pop()!;
      for (const line of lines) {
        stderrLines.push(line);
        // Only building is news; "cached" lines would be noise on every start.
        if (!/: (cached|from KUBEBUILDER_ASSETS)/.test(line)) console.error(line);
      }
    }
    if (pending) stderrLines.push(pending);
  })();
  const [stdout, status] = await Promise.all([new Response(child.stdout).text(), child.status]);
  await pump;
  signal?.removeEventListener("abort", onAbort);
  signal?.throwIfAborted();
  if (!status.success) {
    throw new Error(
      `build.sh failed (exit ${status.code}):\n${stderrLines.slice(-LOG_TAIL_LINES).join("\n")}`,
    );
  }
  const binDir = stdout.trim().split("\n").pop() ?? "";
  if (!binDir.startsWith("/")) throw new Error(`build.sh printed no bin folder: ${stdout}`);
  return binDir;
}

/** Distinct free loopback ports: bind port 0, read the port, close. */
export function freePorts(count: number): number[] {
  const ports = new Set<number>();
  for (let attempt = 0; ports.size < count && attempt < count * 20; attempt++) {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    ports.add((listener.addr as Deno.NetAddr).port);
    listener.close();
  }
  if (ports.size < count) throw new Error(`could not find ${count} distinct free ports`);
  return [...ports];
}

/** Entries of a cluster folder that a fresh start replaces (other files are left alone). */
const CLUSTER_DIR_ENTRIES = [
  "cluster.json",
  "kubeconfig",
  "audit.log",
  "audit-policy.yaml",
  "kwok.yaml",
  "etcd",
  "kubeconfigs",
  "kwok-home",
  "logs",
  "pki",
  "run",
  "users",
];

/** Creates `dir` if needed, removes a previous cluster's state from it and makes its subfolders. */
export async function resetClusterDir(dir: string): Promise<void> {
  await Deno.mkdir(dir, { recursive: true });
  for (const entry of CLUSTER_DIR_ENTRIES) {
    await Deno.remove(join(dir, entry), { recursive: true }).catch((err) => {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    });
  }
  for (const sub of ["logs", "run", "pki", "kubeconfigs", "kwok-home"]) {
    await Deno.mkdir(join(dir, sub), { recursive: true });
  }
}

/** A kubeconfig (context `appservice-local`) with embedded CA, client certificate and key (PEM). */
export function kubeconfigYaml(
  server: string,
  caPem: string,
  certPem: string,
  keyPem: string,
): string {
  return `apiVersion: v1
kind: Config
clusters:
  - name: ${CONTEXT_NAME}
    cluster:
      server: ${server}
      certificate-authority-data: ${btoa(caPem)}
users:
  - name: ${CONTEXT_NAME}-user
    user:
      client-certificate-data: ${btoa(certPem)}
      client-key-data: ${btoa(keyPem)}
contexts:
  - name: ${CONTEXT_NAME}
    context:
      cluster: ${CONTEXT_NAME}
      user: ${CONTEXT_NAME}-user
current-context: ${CONTEXT_NAME}
preferences: {}
`;
}

/**
 * Every request at Metadata level (who, verb, resource, response code; no bodies), except the
 * writes of Leases outside the system namespaces, which are at Request level: their
 * `requestObject` says what a write sent, so a test can tell which stored version a write made
 * even when the answer was lost (a writer killed or its request aborted after the apiserver took
 * it: the version is stored, the event says 504). Node and component Leases stay at Metadata.
 */
const AUDIT_POLICY = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    namespaces: ["kube-system", "kube-node-lease"]
  - level: Request
    verbs: ["create", "update", "patch"]
    resources:
      - group: coordination.k8s.io
        resources: ["leases"]
  - level: Metadata
`;

/** Admin and component kubeconfigs, audit policy, kwok configuration. */
export async function writeConfigFiles(info: ClusterInfo): Promise<void> {
  const pki = dirname(info.caCertFile);
  const ca = await Deno.readTextFile(info.caCertFile);
  for (const [stem] of CLIENT_CERTS) {
    const cert = await Deno.readTextFile(join(pki, `${stem}.crt`));
    const key = await Deno.readTextFile(join(pki, `${stem}.key`));
    const file = stem === "admin" ? info.kubeconfig : join(info.dir, "kubeconfigs", stem);
    await Deno.writeTextFile(file, kubeconfigYaml(info.server, ca, cert, key), { mode: 0o600 });
  }
  await Deno.writeTextFile(join(info.dir, "audit-policy.yaml"), AUDIT_POLICY);
  await Deno.copyFile(KWOK_STAGES_FILE, join(info.dir, "kwok.yaml"));
}

/** Writes `cluster.json` atomically (temporary file, then rename). */
export async function writeClusterInfo(info: ClusterInfo): Promise<void> {
  const file = join(info.dir, "cluster.json");
  await Deno.writeTextFile(`${file}.tmp`, JSON.stringify(info, null, 2) + "\n");
  await Deno.rename(`${file}.tmp`, file);
}
