/**
 * {@linkcode ControlPlane}: a local control plane as a test uses it — started in a folder of its
 * own ({@linkcode startControlPlane}) or found running ({@linkcode connectControlPlane}), with an
 * admin client, a kubeconfig per identity, CRDs applied and waited for, the audit log, an
 * apiserver restart, an etcd compaction and a stop. Built on lifecycle.ts.
 * @module
 */

import { join, resolve } from "node:path";
import { parseAllDocuments } from "yaml";
import {
  type ClientOptions,
  CRDS,
  KubeClient,
  type KubeObject,
  loadClusterConfig,
  type ResourceType,
} from "../kube/mod.ts";
import {
  type ClusterInfo,
  type ControlPlaneComponents,
  DEFAULT_APISERVER_DOWN_MS,
  POLL_INTERVAL_MS,
} from "./config.ts";
import { kubeconfigYaml } from "./files.ts";
import {
  compactEtcd,
  readClusterInfo,
  restartApiserver,
  startCluster,
  stopCluster,
} from "./lifecycle.ts";
import { issueCertificate } from "./pki.ts";
import { errorText, sleep } from "./util.ts";

/** Options of {@linkcode startControlPlane}. */
export interface StartControlPlaneOptions {
  /**
   * Folder of the control plane (kubeconfig, `audit.log`, logs, certificates, etcd data). Default:
   * a new temporary folder, removed again by {@linkcode ControlPlane.stop} unless `keepDir`. A
   * folder given here is kept; a control plane running in it is stopped first and its previous
   * state (etcd data, certificates, logs, audit log) replaced.
   */
  dir?: string;
  /** Keep a temporary `dir` after stop (for its logs and audit log); default false. */
  keepDir?: boolean;
  /** Which components run; default `"full"` (see {@linkcode ControlPlaneComponents}). */
  components?: ControlPlaneComponents;
  /** Number of simulated (kwok) Nodes with `"full"`; default 3. */
  nodes?: number;
  /** CRDs to apply once it is up, as {@linkcode ControlPlane.applyCrds} takes them. */
  crds?: (string | KubeObject)[];
  /** Options of the admin client {@linkcode ControlPlane.client} makes (e.g. `userAgent`). */
  clientOptions?: ClientOptions;
  /**
   * Feature gates of kube-apiserver by name, e.g. `{ ShardedListAndWatch: true }` (alpha in
   * Kubernetes 1.36: `shardSelector` on lists and watches). Kept across
   * {@linkcode ControlPlane.restartApiserver}, reported by {@linkcode ControlPlane.featureGates}
   * (also of a plane found with {@linkcode connectControlPlane}). Default: the release's defaults.
   */
  featureGates?: Record<string, boolean>;
  /** Aborts the start; whatever was started is stopped again. */
  signal?: AbortSignal;
}

/** Options of {@linkcode connectControlPlane}. */
export interface ConnectControlPlaneOptions {
  /** Options of the admin client {@linkcode ControlPlane.client} makes (e.g. `userAgent`). */
  clientOptions?: ClientOptions;
}

/** Options of {@linkcode ControlPlane.applyCrds}. */
export interface ApplyCrdsOptions {
  /** Field manager of the server-side apply; default `testing`. */
  fieldManager?: string;
  /** Bound of the wait until every CRD is Established and served, in ms; default 30,000. */
  timeoutMs?: number;
}

/** Options of {@linkcode ControlPlane.kubeconfigFor}. */
export interface KubeconfigForOptions {
  /** Server URL written into the kubeconfig (e.g. a fault proxy's `url`); default `server`. */
  server?: string;
}

/** Options of {@linkcode ControlPlane.auditEvents}. */
export interface AuditEventsOptions {
  /** Only events whose `stageTimestamp` is at or after this time (ms since the epoch). */
  sinceMs?: number;
  /** Only events whose `userAgent` starts with this. */
  userAgentPrefix?: string;
  /** Only events of this user name (`user.username`, e.g. a `kubeconfigFor` user). */
  username?: string;
  /**
   * Wait this long first (ms; default 300): the apiserver writes an event after it has answered
   * the request, so a request that just returned may not be in the file yet.
   */
  settleMs?: number;
}

/**
 * One event of the audit log (audit.k8s.io/v1 `Event`, Metadata level — Request level for Lease
 * writes outside kube-system and kube-node-lease — stage
 * `ResponseComplete` or `Panic`): the fields most tests read; the rest of the line is kept.
 */
export interface AuditEvent {
  /** `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`. */
  verb: string;
  /** Path and query of the request. */
  requestURI: string;
  /** The client's User-Agent header. */
  userAgent?: string;
  /** Who made it; `extra` holds e.g. the Pod of a bound ServiceAccount token. */
  user?: { username?: string; groups?: string[]; extra?: Record<string, string[]> };
  /** The object addressed, when the request addressed one. */
  objectRef?: {
    apiGroup?: string;
    apiVersion?: string;
    resource?: string;
    subresource?: string;
    namespace?: string;
    name?: string;
  };
  /** The answer's HTTP status code. */
  responseStatus?: { code?: number };
  /** Unique id of the request (the apiserver's `Audit-Id` response header). */
  auditID?: string;
  /** When the apiserver received the request (RFC 3339, microseconds). */
  requestReceivedTimestamp?: string;
  /** When this stage was reached (RFC 3339, microseconds). */
  stageTimestamp: string;
  /**
   * The body the request sent, as decoded: only for Lease writes (create, update, patch) outside
   * kube-system and kube-node-lease, which the audit policy logs at Request level.
   */
  requestObject?: unknown;
  /** e.g. `authorization.k8s.io/decision`: `allow` or `forbid`. */
  annotations?: Record<string, string>;
  /** Any other field of the event. */
  [field: string]: unknown;
}

/** The part of a CustomResourceDefinition {@linkcode ControlPlane.applyCrds} reads. */
interface CrdLike extends KubeObject {
  spec?: {
    group?: string;
    names?: { kind?: string; plural?: string };
    scope?: string;
    versions?: { name: string; served?: boolean }[];
  };
  status?: { conditions?: { type: string; status: string }[] };
}

/**
 * A running local control plane: etcd and kube-apiserver on 127.0.0.1 (and, with components
 * `"full"`, kube-controller-manager, kube-scheduler and kwok), as {@linkcode startControlPlane}
 * or {@linkcode connectControlPlane} returns it. `await using` stops one it started and only
 * closes the client of one it connected to.
 */
export class ControlPlane implements AsyncDisposable {
  /** What `cluster.json` records: folder, binaries, endpoints, certificates, pids. */
  readonly info: ClusterInfo;
  readonly #owned: boolean;
  readonly #removeDir: boolean;
  readonly #clientOptions: ClientOptions;
  #client?: KubeClient;
  #users = 0;

  private constructor(
    info: ClusterInfo,
    o: { owned: boolean; removeDir: boolean; clientOptions?: ClientOptions },
  ) {
    this.info = info;
    this.#owned = o.owned;
    this.#removeDir = o.removeDir;
    this.#clientOptions = o.clientOptions ?? {};
  }

  /** @internal Used by {@linkcode startControlPlane} and {@linkcode connectControlPlane}. */
  static create(
    info: ClusterInfo,
    o: { owned: boolean; removeDir: boolean; clientOptions?: ClientOptions },
  ): ControlPlane {
    return new ControlPlane(info, o);
  }

  /** Absolute path of the control plane's folder. */
  get dir(): string {
    return this.info.dir;
  }

  /**
   * The admin kubeconfig (group `system:masters`, certificates embedded, context
   * `appservice-local`).
   */
  get kubeconfig(): string {
    return this.info.kubeconfig;
  }

  /** The apiserver's URL, `https://127.0.0.1:<port>`. */
  get server(): string {
    return this.info.server;
  }

  /** PEM file of the cluster CA, which signs the serving and every client certificate. */
  get caCertFile(): string {
    return this.info.caCertFile;
  }

  /**
   * The apiserver's audit log: one JSON event per line, every request at Metadata level; Lease
   * writes outside kube-system and kube-node-lease at Request level (with `requestObject`).
   */
  get auditLogFile(): string {
    return join(this.info.dir, "audit.log");
  }

  /**
   * The feature gates kube-apiserver was started with (`--feature-gates`), by name; `{}` when none
   * was given (the release's defaults). Read from `cluster.json`, so also known to a plane found
   * with {@linkcode connectControlPlane}.
   */
  get featureGates(): Record<string, boolean> {
    return { ...this.info.featureGates };
  }

  /** Folder of the binaries it runs (etcd, kube-apiserver, kubectl when there, ...). */
  get binDir(): string {
    return this.info.binDir;
  }

  /**
   * The admin client (made on first use from {@linkcode kubeconfig} with the `clientOptions`
   * given at start or connect, then the same one); {@linkcode stop} and {@linkcode close} close
   * it. For another identity: `new KubeClient(loadClusterConfig({ kubeconfig: await
   * plane.kubeconfigFor(...) }))`, closed by the caller.
   */
  client(): KubeClient {
    this.#client ??= new KubeClient(
      loadClusterConfig({ kubeconfig: this.info.kubeconfig }),
      this.#clientOptions,
    );
    return this.#client;
  }

  /**
   * A kubeconfig for `user` in `groups`: a client certificate (ECDSA P-256, a year) signed by the
   * cluster CA with `CN=<user>` and one `O=<group>` per group, which the apiserver's x509
   * authenticator maps to exactly that user and those groups (plus `system:authenticated`).
   * What the user may do is up to RBAC: bind a Role to the user or a group first (the group
   * `system:masters` may do everything). Written to `<dir>/users/` with the certificate and key
   * embedded; returns its path.
   * @throws Error when `user` is empty, a name holds a control character, or openssl fails
   */
  async kubeconfigFor(
    user: string,
    groups: string[] = [],
    opts: KubeconfigForOptions = {},
  ): Promise<string> {
    const names = [user, ...groups];
    const control = (n: string) => [...n].some((ch) => ch < " " || ch === "\x7f");
    if (user === "" || names.some(control)) {
      throw new Error(`kubeconfigFor: bad user or group name in ${JSON.stringify(names)}`);
    }
    // openssl -subj: `/` and `+` separate attributes, `\` escapes.
    const escape = (v: string) => v.replace(/[\\/+]/g, (c) => `\\${c}`);
    const subject = groups.map((g) => `/O=${escape(g)}`).join("") + `/CN=${escape(user)}`;
    const usersDir = join(this.info.dir, "users");
    await Deno.mkdir(usersDir, { recursive: true });
    const stem = `${++this.#users}-${user.replace(/[^\w.-]/g, "_").slice(0, 60)}`;
    const ca = { certFile: this.info.caCertFile, keyFile: this.info.caKeyFile };
    const { certFile, keyFile } = await issueCertificate({
      dir: usersDir,
      stem,
      subject,
      kind: "client",
      ca,
    });
    const file = join(usersDir, `${stem}.kubeconfig`);
    const yaml = kubeconfigYaml(
      opts.server ?? this.info.server,
      await Deno.readTextFile(this.info.caCertFile),
      await Deno.readTextFile(certFile),
      await Deno.readTextFile(keyFile),
    );
    await Deno.writeTextFile(file, yaml, { mode: 0o600 });
    return file;
  }

  /**
   * Applies CustomResourceDefinitions with a forced server-side apply and waits until each is
   * Established and every served version answers a list (discovery lags behind Established).
   * Each source is a CRD object or the path of a YAML file with one or more CRDs (`---`
   * separated); other kinds in a file are an error.
   * @returns the applied CRDs' names, in order
   * @throws Error naming the CRD when it is not served within `timeoutMs`, or a file holds
   *   something other than CRDs; the client's ApiError when the apiserver refuses one
   */
  async applyCrds(
    sources: (string | KubeObject)[],
    opts: ApplyCrdsOptions = {},
  ): Promise<string[]> {
    const crds: CrdLike[] = [];
    for (const source of sources) {
      if (typeof source !== "string") {
        crds.push(source as CrdLike);
        continue;
      }
      const docs = parseAllDocuments(await Deno.readTextFile(source))
        .map((d) => d.toJS() as CrdLike | null)
        .filter((d): d is CrdLike => d !== null);
      for (const doc of docs) {
        if (doc.kind !== CRDS.kind) {
          throw new Error(`applyCrds: ${source} holds a ${doc.kind}, not only CRDs`);
        }
        crds.push(doc);
      }
    }
    const c = this.client();
    const fieldManager = opts.fieldManager ?? "testing";
    for (const crd of crds) {
      const name = crd.metadata?.name;
      if (!name) throw new Error("applyCrds: a CRD without metadata.name");
      await c.patch(CRDS, name, crd, { type: "apply", fieldManager, force: true });
    }
    const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
    for (const crd of crds) {
      const name = crd.metadata!.name!;
      await this.#until(`CRD ${name} Established`, deadline, async () => {
        const got = await c.get<CrdLike>(CRDS, name);
        return got.status?.conditions?.some((x) => x.type === "Established" && x.status === "True");
      });
      const spec = crd.spec ?? {};
      for (const v of spec.versions ?? []) {
        if (v.served === false) continue;
        const rt: ResourceType = {
          apiVersion: `${spec.group}/${v.name}`,
          kind: spec.names?.kind ?? "",
          plural: spec.names?.plural ?? "",
          namespaced: spec.scope === "Namespaced",
        };
        await this.#until(`${rt.plural}.${rt.apiVersion} served`, deadline, async () => {
          await c.list(rt, { limit: 1 });
          return true;
        });
      }
    }
    return crds.map((crd) => crd.metadata!.name!);
  }

  /** Polls `check` (a throw is "not yet") until it returns true or `deadline` passes. */
  async #until(what: string, deadline: number, check: () => Promise<boolean | undefined>) {
    let last = "";
    for (let i = 0; i < 100_000; i++) {
      try {
        if (await check()) return;
      } catch (err) {
        last = errorText(err);
      }
      if (Date.now() > deadline) break;
      await sleep(POLL_INTERVAL_MS);
    }
    throw new Error(`applyCrds: timed out waiting for ${what}${last ? ` (last: ${last})` : ""}`);
  }

  /**
   * The audit log's events, oldest first, filtered by `opts` (time, user agent, user). A partial
   * last line (being written) is skipped. The log holds every request since the start, at
   * Metadata level (no bodies; Lease writes outside the system namespaces with their request
   * body), stage `ResponseComplete` (and `Panic`).
   * @throws Error when the log cannot be read (e.g. the folder was removed)
   */
  async auditEvents(opts: AuditEventsOptions = {}): Promise<AuditEvent[]> {
    await sleep(opts.settleMs ?? 300);
    const text = await Deno.readTextFile(this.auditLogFile);
    // A cheap test before the parse (a long run's log has many lines): the text a filter asks for
    // stands in the line as is unless JSON escapes it (quotes, backslashes, <>&, control chars).
    const verbatim = [opts.userAgentPrefix, opts.username].filter((v): v is string =>
      !!v && !/[\\"<>&]/.test(v) && ![...v].some((ch) => ch < " ")
    );
    const out: AuditEvent[] = [];
    for (const line of text.split("\n")) {
      if (line === "" || verbatim.some((v) => !line.includes(v))) continue;
      let e: AuditEvent;
      try {
        e = JSON.parse(line) as AuditEvent;
      } catch {
        continue;
      }
      if (opts.sinceMs !== undefined && Date.parse(e.stageTimestamp) < opts.sinceMs) continue;
      if (opts.userAgentPrefix !== undefined && !e.userAgent?.startsWith(opts.userAgentPrefix)) {
        continue;
      }
      if (opts.username !== undefined && e.user?.username !== opts.username) continue;
      out.push(e);
    }
    return out;
  }

  /**
   * Stops kube-apiserver (SIGTERM, SIGKILL after 10 s), keeps it down `downMs` (default 1000),
   * starts it again on the same port with the same etcd and waits until `/readyz` is ok. Clients
   * see their connections drop and reconnect; etcd's data (and so every object) stays.
   * @throws Error when the control plane is not running or the apiserver does not come back
   */
  restartApiserver(downMs: number = DEFAULT_APISERVER_DOWN_MS): Promise<void> {
    return restartApiserver(this.info, downMs);
  }

  /**
   * Compacts etcd to its current revision: lists and watches from an older resourceVersion then
   * get 410 Gone (once the apiserver's watch cache no longer holds it).
   * @throws Error when etcd does not answer
   */
  compact(): Promise<void> {
    return compactEtcd(this.info);
  }

  /** Closes the admin client, leaving the control plane running. */
  close(): void {
    this.#client?.close();
    this.#client = undefined;
  }

  /**
   * Closes the admin client and stops every component (SIGTERM, SIGKILL after 10 s; etcd last),
   * whoever started them; removes the folder when it was a temporary one made by
   * {@linkcode startControlPlane} without `keepDir`. Safe to call twice.
   * @throws Error when a process survived SIGKILL
   */
  async stop(): Promise<void> {
    this.close();
    await stopCluster(this.info);
    if (this.#removeDir) await Deno.remove(this.info.dir, { recursive: true }).catch(() => {});
  }

  /** {@linkcode stop} for a control plane this process started, {@linkcode close} otherwise. */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.#owned) await this.stop();
    else this.close();
  }
}

/**
 * Starts a local control plane on 127.0.0.1 and waits until it serves (with `"full"`, also until
 * its Nodes are Ready and the `default` ServiceAccount exists); applies `opts.crds`. Binaries
 * come from `KUBEBUILDER_ASSETS` when that folder has them (etcd, kube-apiserver, kubectl), else
 * from the cache (`APPSERVICE_CACHE_DIR`, default `<package>/.cache`), built from the pinned Go
 * modules in build/ on first use (needs Go; 10 to 15 minutes on 2 cores). Needs Linux, bash,
 * setsid and openssl. Stop it with {@linkcode ControlPlane.stop} or `await using`; if this
 * process dies first, the control plane's supervisor stops its processes (a temporary folder is
 * then left behind, named `control-plane-*` in the system's temporary folder).
 *
 * Test sanitizers: the supervisor is a child process until `stop` reaps it, so start and stop
 * within one `Deno.test` (use steps), or turn `sanitizeResources` off.
 *
 * ```ts
 * await using plane = await startControlPlane({ components: "minimal", crds: ["crd.yaml"] });
 * const client = plane.client();
 * ```
 * @throws Error naming the component that failed to start, with the end of its log
 */
export async function startControlPlane(
  opts: StartControlPlaneOptions = {},
): Promise<ControlPlane> {
  const temporary = opts.dir === undefined;
  const dir = opts.dir === undefined
    ? await Deno.makeTempDir({ prefix: "control-plane-" })
    : resolve(opts.dir);
  let info: ClusterInfo;
  try {
    info = await startCluster({
      dir,
      components: opts.components,
      nodes: opts.nodes,
      featureGates: opts.featureGates,
      signal: opts.signal,
    });
  } catch (err) {
    if (temporary && !opts.keepDir) await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw err;
  }
  const plane = ControlPlane.create(info, {
    owned: true,
    removeDir: temporary && !opts.keepDir,
    clientOptions: opts.clientOptions,
  });
  if (opts.crds?.length) {
    try {
      await plane.applyCrds(opts.crds);
    } catch (err) {
      await plane.stop();
      throw err;
    }
  }
  return plane;
}

/**
 * The control plane running in `dir` (started by another process, e.g. `deno task cluster:up`
 * or a test runner), read from its `cluster.json`. `await using` only closes its client; call
 * {@linkcode ControlPlane.stop} to stop it.
 * @throws Error when no control plane is recorded in `dir`
 */
export async function connectControlPlane(
  dir: string,
  opts: ConnectControlPlaneOptions = {},
): Promise<ControlPlane> {
  const info = await readClusterInfo(dir);
  if (!info) throw new Error(`no control plane recorded in ${resolve(dir)} (no cluster.json)`);
  return ControlPlane.create(info, {
    owned: false,
    removeDir: false,
    clientOptions: opts.clientOptions,
  });
}
