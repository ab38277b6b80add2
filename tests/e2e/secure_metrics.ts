/**
 * Helpers of the tests that scrape the operator's secure `/metrics` (HTTPS, bearer token): the
 * certificate a server presents (read with `openssl s_client`, so a self-signed one can be
 * trusted explicitly instead of skipping verification), a scrape with a token, deploy/'s
 * metrics-reader ClusterRole and ServiceAccounts bound to it.
 *
 * @module
 */
import { parse as parseYaml } from "yaml";
import type { KubeObject } from "../../lib/kube/client.ts";
import { admin, REPO } from "./harness.ts";
import { CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, RBAC, SERVICE_ACCOUNTS } from "./resources.ts";

/** The first certificate (PEM) the TLS server on 127.0.0.1:`port` presents. */
export async function servedCertificate(port: number): Promise<string> {
  const out = await new Deno.Command("openssl", {
    args: ["s_client", "-connect", `127.0.0.1:${port}`, "-servername", "localhost", "-showcerts"],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(15_000),
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  const m = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----\n/.exec(text);
  if (!m) {
    throw new Error(
      `no certificate from 127.0.0.1:${port}: ${new TextDecoder().decode(out.stderr).slice(-500)}`,
    );
  }
  return m[0];
}

/** One scrape's outcome: HTTP status, body, and the time to the whole answer (ms). */
export interface Scrape {
  status: number;
  text: string;
  ms: number;
}

/** GET `url` with `client`, and a bearer token if given. */
export async function scrape(
  url: string,
  client: Deno.HttpClient,
  token?: string,
): Promise<Scrape> {
  const t0 = performance.now();
  const r = await fetch(url, {
    client,
    headers: token ? { Authorization: `Bearer ${token}` } : {},
    signal: AbortSignal.timeout(30_000),
  });
  const text = await r.text();
  return { status: r.status, text, ms: performance.now() - t0 };
}

/** Applies deploy/metrics_reader_role.yaml (server-side apply); returns the ClusterRole's name. */
export async function applyMetricsReaderRole(): Promise<string> {
  const role = parseYaml(
    await Deno.readTextFile(`${REPO}/deploy/metrics_reader_role.yaml`),
  ) as KubeObject;
  await (await admin()).patch(CLUSTER_ROLES, role.metadata!.name!, role, {
    type: "apply",
    fieldManager: "appservice-e2e",
    force: true,
  });
  return role.metadata!.name!;
}

/** Creates ServiceAccounts `names` in `ns`. */
export async function createServiceAccounts(ns: string, names: string[]): Promise<void> {
  const c = await admin();
  for (const name of names) {
    await c.create(SERVICE_ACCOUNTS, {
      apiVersion: "v1",
      kind: "ServiceAccount",
      metadata: { name, namespace: ns },
    } as KubeObject);
  }
}

/**
 * Binds the metrics-reader ClusterRole (applied first) to ServiceAccounts `names` of `ns` with a
 * ClusterRoleBinding named `binding`; returns a function deleting it.
 */
export async function bindMetricsReader(
  binding: string,
  ns: string,
  names: string[],
): Promise<() => Promise<void>> {
  const c = await admin();
  const role = await applyMetricsReaderRole();
  await c.create(CLUSTER_ROLE_BINDINGS, {
    apiVersion: RBAC,
    kind: "ClusterRoleBinding",
    metadata: { name: binding },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role },
    subjects: names.map((name) => ({ kind: "ServiceAccount", name, namespace: ns })),
  } as KubeObject);
  return async () => {
    await c.delete(CLUSTER_ROLE_BINDINGS, binding).catch(() => {});
  };
}
