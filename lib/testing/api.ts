/**
 * HTTP to the local control plane: etcd's gateway and the API server (readiness, kwok Nodes).
 * @module
 */

import { dirname, join } from "node:path";
import {
  APISERVER_READY_TIMEOUT_MS,
  type ClusterInfo,
  HTTP_TIMEOUT_MS,
  KWOK_NODE_ANNOTATION,
  NODE_RESOURCES,
} from "./config.ts";
import { waitFor } from "./processes.ts";

/** Whether etcd's gateway answers `/health` with `health: "true"` (one request, bounded). */
export async function etcdHealthy(info: ClusterInfo): Promise<boolean> {
  const res = await fetch(`${info.etcdEndpoint}/health`, {
    signal: AbortSignal.timeout(HTTP_TIMEOUT_MS),
  });
  const body = await res.json() as { health?: string };
  return res.ok && body.health === "true";
}

/** POSTs JSON to etcd's gRPC gateway (e.g. `/v3/kv/compaction`); returns the parsed answer, throws on non-2xx. */
export async function etcdPost(info: ClusterInfo, path: string, body: unknown): Promise<unknown> {
  const res = await fetch(`${info.etcdEndpoint}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`etcd ${path}: HTTP ${res.status}: ${text}`);
  return JSON.parse(text);
}

/** An admin request to the API server: method, path, JSON body; the answer's status and parsed body. */
export type Api = (method: string, path: string, body?: unknown) => Promise<{
  status: number;
  body: unknown;
}>;

/** Runs `fn` with an admin API client (mutual TLS with the admin certificate). */
export async function withApi<T>(info: ClusterInfo, fn: (api: Api) => Promise<T>): Promise<T> {
  const pki = dirname(info.caCertFile);
  const client = Deno.createHttpClient({
    caCerts: [await Deno.readTextFile(info.caCertFile)],
    cert: await Deno.readTextFile(join(pki, "admin.crt")),
    key: await Deno.readTextFile(join(pki, "admin.key")),
  });
  const api: Api = async (method, path, body) => {
    const res = await fetch(`${info.server}${path}`, {
      method,
      client,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(HTTP_TIMEOUT_MS * 5),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch { /* not JSON, e.g. /readyz */ }
    return { status: res.status, body: parsed };
  };
  try {
    return await fn(api);
  } finally {
    client.close();
  }
}

/** Waits until the API server's `/readyz` answers 200, bounded by the API server's ready timeout. */
export async function waitApiserverReady(info: ClusterInfo, signal?: AbortSignal): Promise<void> {
  await withApi(
    info,
    (api) =>
      waitFor(
        info,
        "kube-apiserver",
        "to be ready",
        APISERVER_READY_TIMEOUT_MS,
        signal,
        async () => {
          const res = await api("GET", "/readyz");
          return res.status === 200;
        },
      ),
  );
}

/** The part of a Node that {@linkcode isNodeReady} reads. */
export interface NodeLike {
  status?: { conditions?: { type: string; status: string }[] };
}

/** Whether a Node's `Ready` condition is True. */
export function isNodeReady(node: NodeLike): boolean {
  return (node.status?.conditions ?? []).some((c) => c.type === "Ready" && c.status === "True");
}

/** Creates one kwok Node (127.0.0.1, fixed capacity); an existing Node of that name (409) is fine. */
export async function createNode(api: Api, name: string): Promise<void> {
  const res = await api("POST", "/api/v1/nodes", {
    apiVersion: "v1",
    kind: "Node",
    metadata: {
      name,
      annotations: { [KWOK_NODE_ANNOTATION]: "fake", "node.alpha.kubernetes.io/ttl": "0" },
      labels: {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/role": "agent",
        "node-role.kubernetes.io/agent": "",
        type: "kwok",
      },
    },
    spec: {},
    status: {
      allocatable: { ...NODE_RESOURCES },
      capacity: { ...NODE_RESOURCES },
      addresses: [
        { type: "InternalIP", address: "127.0.0.1" },
        { type: "Hostname", address: name },
      ],
    },
  });
  if (res.status !== 201 && res.status !== 409) {
    throw new Error(`creating Node ${name}: HTTP ${res.status}: ${JSON.stringify(res.body)}`);
  }
}
