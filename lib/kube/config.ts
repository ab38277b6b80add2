/**
 * Where the apiserver is and how to authenticate to it: kubeconfig files (merged as kubectl merges
 * them), the in-cluster service account, and the credential sources behind a user entry (client
 * certificate, token, tokenFile, exec plugin).
 *
 * Rules followed (client-go `clientcmd` and `rest.InClusterConfig`):
 * - Order: an explicit `--kubeconfig` path; else every file in `KUBECONFIG` (colon-separated),
 *   merged so that the first file to define a cluster, user or context name wins and the first
 *   `current-context` wins; else the in-cluster service account when `KUBERNETES_SERVICE_HOST` is
 *   set; else `~/.kube/config`.
 * - Relative file paths in a kubeconfig are resolved against the directory of that file.
 * - Credential files (`certificate-authority`, `client-certificate`, `client-key`, `tokenFile`, the
 *   in-cluster `ca.crt` and `token`) are named in the result (`caFile`, `certFile`, `keyFile`,
 *   `path`) so that the client can read them again when they change (see credentials.ts); inline
 *   `*-data` fields are fixed for the life of the process.
 * - A field this client cannot honour (`insecure-skip-tls-verify`, `auth-provider`,
 *   `username`/`password`) and a user entry with no credential at all are errors: the client never
 *   downgrades to an unverified or anonymous connection.
 *
 * @module
 */
// js-yaml rather than `yaml`: why, in docs/design/client.md ("Kubeconfig parsing"). CORE_SCHEMA
// is YAML 1.2's core schema, as `yaml` parses by default: no timestamps turned into Dates, no
// merge keys.
import { CORE_SCHEMA, load } from "js-yaml";
import { ConfigError } from "./errors.ts";

/** An exec credential plugin as declared in a kubeconfig user (client.authentication.k8s.io). */
export interface ExecConfig {
  /** ExecCredential version the plugin speaks: `client.authentication.k8s.io/v1` or `v1beta1`. */
  apiVersion: string;
  /** The plugin's executable (a relative path is resolved against `baseDir`). */
  command: string;
  /** Arguments of the command. */
  args?: string[];
  /** Extra environment variables of the command. */
  env?: { name: string; value: string }[];
  /** Whether the plugin wants the cluster info in KUBERNETES_EXEC_INFO (ignored beyond the flag). */
  provideClusterInfo?: boolean;
  /** Directory the command's relative path is resolved against (the kubeconfig's directory). */
  baseDir: string;
}

/** How requests authenticate; exactly one source, as a discriminated union. */
export type AuthConfig =
  | {
    kind: "clientCertificate";
    certPem: string;
    keyPem: string;
    /** The `client-certificate` file the PEM came from (absent for `client-certificate-data`). */
    certFile?: string;
    /** The `client-key` file the PEM came from (absent for `client-key-data`). */
    keyFile?: string;
  }
  | { kind: "token"; token: string }
  | { kind: "tokenFile"; path: string }
  | { kind: "exec"; exec: ExecConfig };

/** A resolved connection: apiserver URL, trust, identity and default namespace. */
export interface ClusterConfig {
  /** Base URL of the apiserver, e.g. `https://127.0.0.1:6443` (no trailing slash). */
  server: string;
  /** PEM bundle of CAs trusted for the apiserver; undefined means the system roots. */
  caPem?: string;
  /** The file `caPem` was read from (`certificate-authority`, in-cluster `ca.crt`), if any. */
  caFile?: string;
  /** HTTP(S) proxy URL from the kubeconfig's `proxy-url`. */
  proxyUrl?: string;
  /** The credential source. */
  auth: AuthConfig;
  /** Namespace of the context (or the service account's), "default" when unset. */
  namespace: string;
  /** Human-readable origin, e.g. `kubeconfig /x/config (context dev)` or `in-cluster`. */
  source: string;
}

/** Options of {@link loadClusterConfig}. */
export interface LoadOptions {
  /** Explicit kubeconfig path (`--kubeconfig`); takes precedence over everything else. */
  kubeconfig?: string;
  /** Context to use instead of `current-context` (`--context`). */
  context?: string;
  /** Environment to read (`KUBECONFIG`, `KUBERNETES_SERVICE_HOST`/`PORT`, `HOME`). */
  env?: (name: string) => string | undefined;
  /** Service account folder for in-cluster mode; default the Kubernetes one. */
  serviceAccountDir?: string;
}

/** Folder where Kubernetes mounts the service account token, CA and namespace. */
export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

// deno-lint-ignore no-explicit-any
type Raw = any;

interface RawEntry {
  raw: Raw;
  dir: string;
  file: string;
}

function dirOf(path: string): string {
  const i = path.lastIndexOf("/");
  return i < 0 ? "." : i === 0 ? "/" : path.slice(0, i);
}

function resolvePath(path: string, baseDir: string): string {
  return path.startsWith("/") ? path : `${baseDir}/${path}`;
}

function readText(path: string, what: string): string {
  try {
    return Deno.readTextFileSync(path);
  } catch (err) {
    const why = err instanceof Deno.errors.NotFound ? "no such file" : (err as Error).message;
    throw new ConfigError(`cannot read ${what} ${path}: ${why}`);
  }
}

function decodeBase64(data: string, what: string): string {
  try {
    return new TextDecoder().decode(Uint8Array.from(atob(data.trim()), (c) => c.charCodeAt(0)));
  } catch {
    throw new ConfigError(`${what} is not valid base64`);
  }
}

/**
 * Checks that `pem` holds at least one PEM certificate (a CA bundle).
 * @throws ConfigError naming `what`
 */
export function checkCaPem(pem: string, what: string): void {
  if (!pem.includes("-----BEGIN CERTIFICATE-----")) {
    throw new ConfigError(`${what}: certificate authority is not a PEM certificate`);
  }
}

/**
 * Checks a client certificate and key pair as PEM (both present, a certificate, a private key).
 * @throws ConfigError naming `what`
 */
export function checkClientPair(
  certPem: string | undefined,
  keyPem: string | undefined,
  what: string,
): void {
  if (!certPem) throw new ConfigError(`${what} has a client key but no client certificate`);
  if (!keyPem) throw new ConfigError(`${what} has a client certificate but no client key`);
  if (!certPem.includes("-----BEGIN CERTIFICATE-----")) {
    throw new ConfigError(`${what}: client certificate is not PEM`);
  }
  if (!/-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(keyPem)) {
    throw new ConfigError(`${what}: client key is not a PEM private key`);
  }
}

function parseKubeconfigFile(path: string): Raw {
  const text = readText(path, "kubeconfig");
  let doc: Raw;
  try {
    doc = load(text, { schema: CORE_SCHEMA }) as Raw;
  } catch (err) {
    // js-yaml's YAMLException: `reason` and a 0-based `mark`; its message adds a code snippet.
    const e = err as { reason?: string; mark?: { line: number; column: number }; message?: string };
    const where = e.mark ? ` at line ${e.mark.line + 1}, column ${e.mark.column + 1}` : "";
    const what = e.reason ?? String(e.message).split("\n")[0];
    throw new ConfigError(`kubeconfig ${path} is not valid YAML: ${what}${where}`);
  }
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== "object" || Array.isArray(doc)) {
    throw new ConfigError(`kubeconfig ${path} is not a kubeconfig (expected a mapping)`);
  }
  // A mapping with none of a kubeconfig's keys (e.g. a truncated or unrelated YAML file).
  const known = ["apiVersion", "kind", "clusters", "users", "contexts", "current-context"];
  if (Object.keys(doc).length > 0 && !known.some((k) => k in doc)) {
    throw new ConfigError(
      `kubeconfig ${path} is not a kubeconfig (none of ${known.join(", ")} in it)`,
    );
  }
  for (const list of ["clusters", "users", "contexts"]) {
    if (doc[list] !== undefined && doc[list] !== null && !Array.isArray(doc[list])) {
      throw new ConfigError(`kubeconfig ${path}: ${list} must be a list`);
    }
  }
  return doc;
}

/**
 * Merges kubeconfig files kubectl's way: the first file to define a name wins, the first
 * `current-context` wins. Returns the merged maps with each entry's file and directory.
 */
function mergeKubeconfigs(paths: string[]) {
  const clusters = new Map<string, RawEntry>();
  const users = new Map<string, RawEntry>();
  const contexts = new Map<string, RawEntry>();
  let currentContext: string | undefined;
  for (const file of paths) {
    const doc = parseKubeconfigFile(file);
    const dir = dirOf(file);
    const add = (map: Map<string, RawEntry>, list: Raw[] | undefined, field: string) => {
      for (const item of list ?? []) {
        if (!item || typeof item.name !== "string") {
          throw new ConfigError(`kubeconfig ${file}: an entry of ${field}s has no name`);
        }
        if (!map.has(item.name)) map.set(item.name, { raw: item[field] ?? {}, dir, file });
      }
    };
    add(clusters, doc.clusters, "cluster");
    add(users, doc.users, "user");
    add(contexts, doc.contexts, "context");
    if (!currentContext && doc["current-context"]) currentContext = doc["current-context"];
  }
  return { clusters, users, contexts, currentContext };
}

function authFromUser(name: string, entry: RawEntry): AuthConfig {
  const u = entry.raw;
  const where = `kubeconfig ${entry.file}: user "${name}"`;
  if (u["auth-provider"]) {
    throw new ConfigError(
      `${where} uses auth-provider "${
        u["auth-provider"].name
      }", which is not supported; use an exec plugin`,
    );
  }
  if (u.username || u.password) {
    throw new ConfigError(`${where} uses basic auth (username/password), which is not supported`);
  }
  const certFile = !u["client-certificate-data"] && u["client-certificate"]
    ? resolvePath(u["client-certificate"], entry.dir)
    : undefined;
  const keyFile = !u["client-key-data"] && u["client-key"]
    ? resolvePath(u["client-key"], entry.dir)
    : undefined;
  const certPem = u["client-certificate-data"]
    ? decodeBase64(u["client-certificate-data"], `${where} client-certificate-data`)
    : certFile
    ? readText(certFile, `${where} client-certificate`)
    : undefined;
  const keyPem = u["client-key-data"]
    ? decodeBase64(u["client-key-data"], `${where} client-key-data`)
    : keyFile
    ? readText(keyFile, `${where} client-key`)
    : undefined;
  if (certPem !== undefined || keyPem !== undefined) {
    checkClientPair(certPem, keyPem, where);
    return {
      kind: "clientCertificate",
      certPem: certPem!,
      keyPem: keyPem!,
      ...(certFile ? { certFile } : {}),
      ...(keyFile ? { keyFile } : {}),
    };
  }
  if (typeof u.token === "string" && u.token !== "") return { kind: "token", token: u.token };
  if (u.tokenFile) {
    const path = resolvePath(u.tokenFile, entry.dir);
    if (readText(path, `${where} tokenFile`).trim() === "") {
      throw new ConfigError(`${where}: tokenFile ${path} is empty`);
    }
    return { kind: "tokenFile", path };
  }
  if (u.exec) {
    const e = u.exec;
    if (!e.command) throw new ConfigError(`${where}: exec has no command`);
    const apiVersion = e.apiVersion ?? "";
    if (
      apiVersion !== "client.authentication.k8s.io/v1" &&
      apiVersion !== "client.authentication.k8s.io/v1beta1"
    ) {
      throw new ConfigError(
        `${where}: exec apiVersion "${apiVersion}" is not supported (client.authentication.k8s.io/v1 or v1beta1)`,
      );
    }
    return {
      kind: "exec",
      exec: {
        apiVersion,
        command: e.command,
        args: e.args ?? [],
        env: e.env ?? [],
        provideClusterInfo: !!e.provideClusterInfo,
        baseDir: entry.dir,
      },
    };
  }
  throw new ConfigError(
    `${where} has no credential (client certificate, token, tokenFile or exec); refusing to connect anonymously`,
  );
}

function fromKubeconfig(paths: string[], contextName?: string): ClusterConfig {
  const merged = mergeKubeconfigs(paths);
  const label = paths.join(":");
  const ctxName = contextName ?? merged.currentContext;
  if (!ctxName) throw new ConfigError(`kubeconfig ${label} has no current-context`);
  const ctx = merged.contexts.get(ctxName);
  if (!ctx) throw new ConfigError(`kubeconfig ${label} has no context "${ctxName}"`);
  const clusterName = ctx.raw.cluster;
  const cluster = merged.clusters.get(clusterName);
  if (!cluster) {
    throw new ConfigError(
      `kubeconfig ${label}: context "${ctxName}" names cluster "${clusterName}", which is not defined`,
    );
  }
  const c = cluster.raw;
  const cwhere = `kubeconfig ${cluster.file}: cluster "${clusterName}"`;
  if (typeof c.server !== "string" || c.server === "") {
    throw new ConfigError(`${cwhere} has no server`);
  }
  let url: URL;
  try {
    url = new URL(c.server);
  } catch {
    throw new ConfigError(`${cwhere}: server "${c.server}" is not a URL`);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new ConfigError(`${cwhere}: server "${c.server}" must be https://`);
  }
  if (c["insecure-skip-tls-verify"]) {
    throw new ConfigError(
      `${cwhere} sets insecure-skip-tls-verify, which this client does not honour; give certificate-authority(-data)`,
    );
  }
  const caFile = !c["certificate-authority-data"] && c["certificate-authority"]
    ? resolvePath(c["certificate-authority"], cluster.dir)
    : undefined;
  const caPem = c["certificate-authority-data"]
    ? decodeBase64(c["certificate-authority-data"], `${cwhere} certificate-authority-data`)
    : caFile
    ? readText(caFile, `${cwhere} certificate-authority`)
    : undefined;
  if (caPem !== undefined) checkCaPem(caPem, cwhere);
  const userName = ctx.raw.user;
  const user = merged.users.get(userName);
  if (!user) {
    throw new ConfigError(
      `kubeconfig ${label}: context "${ctxName}" names user "${userName}", which is not defined`,
    );
  }
  return {
    server: c.server.replace(/\/+$/, ""),
    caPem,
    ...(caFile ? { caFile } : {}),
    proxyUrl: c["proxy-url"] || undefined,
    auth: authFromUser(userName, user),
    namespace: ctx.raw.namespace || "default",
    source: `kubeconfig ${label} (context ${ctxName})`,
  };
}

/**
 * In-cluster configuration (client-go `rest.InClusterConfig`): server from
 * `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT`, CA, token file and namespace from the
 * service account folder. The token and CA files are re-read by the client when they change
 * (bound tokens rotate; so does the cluster CA).
 *
 * @throws ConfigError when the host/port are unset or the CA or token cannot be read.
 */
export function inClusterConfig(
  env: (name: string) => string | undefined,
  serviceAccountDir = SERVICE_ACCOUNT_DIR,
): ClusterConfig {
  const host = env("KUBERNETES_SERVICE_HOST");
  const port = env("KUBERNETES_SERVICE_PORT");
  if (!host || !port) {
    throw new ConfigError(
      "in-cluster configuration needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT",
    );
  }
  const tokenPath = `${serviceAccountDir}/token`;
  if (readText(tokenPath, "service account token").trim() === "") {
    throw new ConfigError(`service account token ${tokenPath} is empty`);
  }
  const caFile = `${serviceAccountDir}/ca.crt`;
  const caPem = readText(caFile, "service account CA");
  let namespace = "default";
  try {
    namespace = Deno.readTextFileSync(`${serviceAccountDir}/namespace`).trim() || "default";
  } catch { /* optional, as in client-go */ }
  const hostPart = host.includes(":") ? `[${host}]` : host;
  return {
    server: `https://${hostPart}:${port}`,
    caPem,
    caFile,
    auth: { kind: "tokenFile", path: tokenPath },
    namespace,
    source: "in-cluster",
  };
}

/**
 * Resolves the connection to use, in client-go's order (see the module doc).
 *
 * @throws ConfigError with a one-line message for any unusable input.
 */
export function loadClusterConfig(opts: LoadOptions = {}): ClusterConfig {
  const env = opts.env ?? ((n: string) => Deno.env.get(n));
  if (opts.kubeconfig) return fromKubeconfig([opts.kubeconfig], opts.context);
  const list = (env("KUBECONFIG") ?? "").split(":").filter((p) => p !== "");
  if (list.length > 0) {
    const existing = list.filter((p) => {
      try {
        Deno.statSync(p);
        return true;
      } catch {
        return false;
      }
    });
    if (existing.length === 0) {
      throw new ConfigError(`KUBECONFIG names no existing file: ${list.join(":")}`);
    }
    return fromKubeconfig(existing, opts.context);
  }
  if (env("KUBERNETES_SERVICE_HOST")) return inClusterConfig(env, opts.serviceAccountDir);
  const home = env("HOME");
  const fallback = home ? `${home}/.kube/config` : undefined;
  if (fallback) {
    try {
      Deno.statSync(fallback);
      return fromKubeconfig([fallback], opts.context);
    } catch (err) {
      if (err instanceof ConfigError) throw err;
    }
  }
  throw new ConfigError(
    `no kubeconfig: pass --kubeconfig, set KUBECONFIG, create ${
      fallback ?? "$HOME/.kube/config"
    }, or run in a cluster (KUBERNETES_SERVICE_HOST)`,
  );
}
