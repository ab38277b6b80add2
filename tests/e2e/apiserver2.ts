/**
 * A second kube-apiserver of the test cluster (same etcd, same flags, another port on
 * 127.0.0.1), for scenarios that need an apiserver the test can fault on its own: a lagging
 * watch cache (its etcd connection through a proxy), or a serving certificate the test rotates.
 *
 * @module
 */
import { KubeClient } from "../../lib/kube/client.ts";
import { loadClusterConfig } from "../../lib/kube/config.ts";
import type { ResourceType } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import type { ClusterInfo } from "../cluster/cluster.ts";
import { freePort, waitFor } from "./harness.ts";

/** A second kube-apiserver of the test cluster, and a client for it. */
export interface SecondApiserver {
  /** `https://127.0.0.1:<port>`. */
  server: string;
  port: number;
  /** An admin client of it (5 s request timeout, no retries). */
  client: KubeClient;
  /** SIGTERM (SIGKILL after 15 s), and waits for the process and its log. */
  stop(): Promise<void>;
}

/** Options of {@link startSecondApiserver}. */
export interface SecondApiserverOptions {
  /** Where its stderr goes. */
  logFile: string;
  /** etcd URL (e.g. a proxy's); default the cluster's etcd. */
  etcdServers?: string;
  /** Resources served from the cluster's etcd directly (`--etcd-servers-overrides`). */
  direct?: string[];
  /** Serving certificate and key files; default the cluster's. */
  tls?: { certFile: string; keyFile: string; caPem: string };
  /** Audit log path (the cluster's audit policy); default none. */
  auditLog?: string;
  /** More flags, appended. */
  extraArgs?: string[];
}

/**
 * Starts a second kube-apiserver with the test cluster's flags on a free port and resolves once
 * it serves AppServices (bounded: 90 s). Its audit log is off unless `auditLog` is given.
 */
export async function startSecondApiserver(
  info: ClusterInfo,
  o: SecondApiserverOptions,
): Promise<SecondApiserver> {
  const port = freePort();
  const args = info.apiserverArgs.slice(1)
    .filter((a) => !a.startsWith("--audit-log-"))
    .filter((a) => !(o.tls && /^--tls-(cert|private-key)-file=/.test(a)))
    .filter((a) => o.auditLog || !a.startsWith("--audit-"))
    .map((a) =>
      a.startsWith("--etcd-servers=") && o.etcdServers
        ? `--etcd-servers=${o.etcdServers}`
        : a.startsWith("--secure-port=")
        ? `--secure-port=${port}`
        : a
    );
  if (o.direct?.length) {
    args.push(
      `--etcd-servers-overrides=${o.direct.map((r) => `${r}#${info.etcdEndpoint}`).join(",")}`,
    );
  }
  if (o.tls) {
    args.push(`--tls-cert-file=${o.tls.certFile}`, `--tls-private-key-file=${o.tls.keyFile}`);
  }
  if (o.auditLog) {
    args.push(`--audit-log-path=${o.auditLog}`, "--audit-log-maxsize=0", "--audit-log-maxbackup=0");
  }
  args.push(...o.extraArgs ?? []);
  const log = await Deno.open(o.logFile, { write: true, create: true, truncate: true });
  const child = new Deno.Command(info.apiserverArgs[0], {
    args,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const logged = child.stderr.pipeTo(log.writable).catch(() => {});
  const server = `https://127.0.0.1:${port}`;
  const admin = loadClusterConfig({ kubeconfig: info.kubeconfig });
  const client = new KubeClient(
    { ...admin, server, caPem: o.tls?.caPem ?? admin.caPem },
    { userAgent: "second-apiserver-e2e", requestTimeoutMs: 5_000, maxRetries: 0 },
  );
  const stop = async () => {
    client.close();
    try {
      child.kill("SIGTERM");
    } catch { /* gone */ }
    const timer = setTimeout(() => {
      try {
        child.kill("SIGKILL");
      } catch { /* gone */ }
    }, 15_000);
    await child.status;
    clearTimeout(timer);
    await logged;
  };
  try {
    await waitFor(
      "the second apiserver serves AppServices",
      async () => {
        await client.list(APPSERVICES as unknown as ResourceType, { limit: 1 });
        return true;
      },
      90_000,
      500,
    );
  } catch (err) {
    await stop();
    throw err;
  }
  return { server, port, client, stop };
}
