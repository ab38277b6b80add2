/**
 * deploy/monitoring/ against the real Prometheus, for tests: the pinned `prometheus` and
 * `promtool` (tests/cluster/build_prometheus.sh), the metric names that the rules' and the
 * dashboard's PromQL select, the ServiceMonitor's endpoint as a plain Prometheus scrape config
 * (what the Prometheus Operator generates from it), and a Prometheus server on 127.0.0.1 with its
 * HTTP API.
 *
 * @module
 */
import { parse as parseYaml } from "yaml";
import { builtPath, freePort } from "../cluster/host.ts";
import { REPO, waitFor } from "./harness.ts";
import { spawnTool } from "./tool_process.ts";

/** deploy/monitoring/: the rules, their promtool tests, the ServiceMonitor, the dashboard. */
export const MONITORING = `${REPO}/deploy/monitoring`;

let binDir: Promise<string> | undefined;

/**
 * The folder holding the pinned `prometheus` and `promtool`: build_prometheus.sh builds them once
 * per version into the cache (or takes `PROMETHEUS_DIR`). Cached per process.
 * @throws Error with build_prometheus.sh's output when it fails
 */
export function prometheusDir(): Promise<string> {
  binDir ??= builtPath("build_prometheus.sh");
  return binDir;
}

/** Output of a finished promtool run. */
export interface ToolResult {
  /** Exit code. */
  code: number;
  /** stdout and stderr together (promtool writes failures to stderr). */
  output: string;
}

/** Runs the pinned `promtool args` in `cwd` (default deploy/monitoring/); at most 2 minutes. */
export async function promtool(args: string[], cwd = MONITORING): Promise<ToolResult> {
  const out = await new Deno.Command(`${await prometheusDir()}/promtool`, {
    args,
    cwd,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(120_000),
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, output: dec.decode(out.stdout) + dec.decode(out.stderr) };
}

/** A Prometheus rule file's group: its name and rules. */
export interface RuleGroup {
  name: string;
  rules: { alert?: string; record?: string; expr: string; for?: string }[];
}

/** The groups of a Prometheus rule file (default deploy/monitoring/rules.yaml). */
export function ruleGroups(file = `${MONITORING}/rules.yaml`): RuleGroup[] {
  return (parseYaml(Deno.readTextFileSync(file)) as { groups: RuleGroup[] }).groups;
}

/** PromQL's aggregation operators (written before `by`/`without` or their parenthesis). */
const AGGREGATIONS = [
  "sum",
  "min",
  "max",
  "avg",
  "group",
  "stddev",
  "stdvar",
  "count",
  "count_values",
  "bottomk",
  "topk",
  "quantile",
  "limitk",
  "limit_ratio",
];
/** PromQL's keywords and number words: never metric names. */
const KEYWORDS = new Set([
  ...AGGREGATIONS,
  ...["by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"],
  ...["and", "or", "unless", "atan2", "inf", "nan", "start", "end"],
]);

/**
 * The metric names a PromQL expression selects: an identifier that follows no letter, digit, `_`,
 * `:` or `.` (so no duration or number) and is not followed by `(` (a function or an
 * aggregation), outside strings, label matchers, ranges and label lists, and not a keyword; also
 * `{__name__="..."}`. Each name once, in order of appearance.
 */
export function metricNames(expr: string): string[] {
  const out = new Set<string>();
  for (const m of expr.matchAll(/__name__\s*=\s*"([^"]+)"/g)) out.add(m[1]);
  const stripped = expr
    .replace(/#[^\n]*/g, " ") // comments
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""') // strings
    .replace(/\{[^}]*\}/g, "{}") // label matchers (the name before them stays)
    .replace(/\[[^\]]*\]/g, "[]") // ranges and subqueries
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/gi, " ");
  const ident = /(?<![\w:.])([a-zA-Z_:][\w:]*)(?=(\s*)(\(?))/g;
  for (const m of stripped.matchAll(ident)) {
    const name = m[1];
    if (m[3] === "(" || KEYWORDS.has(name.toLowerCase())) continue; // a call or a keyword
    out.add(name);
  }
  return [...out];
}

/** Where a metric name is used: the file and the expression. */
export interface NameUse {
  name: string;
  file: string;
  expr: string;
}

/** Every `expr` string anywhere in a parsed JSON document (a Grafana dashboard's targets). */
function jsonExprs(doc: unknown): string[] {
  if (Array.isArray(doc)) return doc.flatMap(jsonExprs);
  if (doc && typeof doc === "object") {
    return Object.entries(doc).flatMap(([k, v]) =>
      k === "expr" && typeof v === "string" ? [v] : jsonExprs(v)
    );
  }
  return [];
}

/**
 * The expressions of deploy/monitoring/rules.yaml (every rule) and dashboard.json (every `expr`,
 * panels in rows too), each with its file (relative to the repository).
 */
export function monitoringExprs(): { file: string; expr: string }[] {
  const rules = ruleGroups().flatMap((g) => g.rules.map((r) => r.expr));
  const dashboard = jsonExprs(JSON.parse(Deno.readTextFileSync(`${MONITORING}/dashboard.json`)));
  return [
    ...rules.map((expr) => ({ file: "deploy/monitoring/rules.yaml", expr })),
    ...dashboard.map((expr) => ({ file: "deploy/monitoring/dashboard.json", expr })),
  ];
}

/** Every metric name the rules and the dashboard use ({@link metricNames} of each expression). */
export function usedMetricNames(): NameUse[] {
  return monitoringExprs().flatMap(({ file, expr }) =>
    metricNames(expr).map((name) => ({ name, file, expr }))
  );
}

/** The uses whose name is not among `present` (e.g. a scrape's names), each name once. */
export function missingNames(uses: NameUse[], present: Iterable<string>): NameUse[] {
  const have = new Set(present);
  const seen = new Set<string>();
  return uses.filter((u) => !have.has(u.name) && !seen.has(u.name) && seen.add(u.name));
}

/** One endpoint of a ServiceMonitor (monitoring.coreos.com/v1), the fields deploy/ uses. */
export interface ServiceMonitorEndpoint {
  port: string;
  path?: string;
  interval?: string;
  scheme?: string;
  bearerTokenFile?: string;
  tlsConfig?: { insecureSkipVerify?: boolean; caFile?: string; serverName?: string };
}

/** What only the test decides in {@link scrapeConfig}: where and how often, and the secrets' files. */
export interface ScrapeTarget {
  /** The job name: the Prometheus Operator's default is the scraped Service's name. */
  job: string;
  /** `host:port` (static target). */
  target: string;
  /** The file holding the ServiceAccount token that `bearerTokenFile` names in a Pod. */
  tokenFile: string;
  /** Overrides the endpoint's `interval`. */
  interval?: string;
}

/**
 * The scrape config the Prometheus Operator generates for `endpoint`, with a static target in
 * place of the Service's endpoints: `scheme`, `path`, `bearerTokenFile` (as `authorization`'s
 * `credentials_file`, the token file given) and `tlsConfig` carried over as they are.
 * @throws Error on an endpoint field it does not translate, so none is silently left out
 */
export function scrapeConfig(
  endpoint: ServiceMonitorEndpoint,
  t: ScrapeTarget,
): Record<string, unknown> {
  const known = ["port", "path", "interval", "scheme", "bearerTokenFile", "tlsConfig"];
  const unknown = Object.keys(endpoint).filter((k) => !known.includes(k));
  if (unknown.length) throw new Error(`ServiceMonitor endpoint fields not translated: ${unknown}`);
  const tls = endpoint.tlsConfig ?? {};
  const unknownTls = Object.keys(tls).filter((k) =>
    !["insecureSkipVerify", "caFile", "serverName"].includes(k)
  );
  if (unknownTls.length) throw new Error(`tlsConfig fields not translated: ${unknownTls}`);
  return {
    job_name: t.job,
    scrape_interval: t.interval ?? endpoint.interval ?? "30s",
    metrics_path: endpoint.path ?? "/metrics",
    scheme: endpoint.scheme ?? "http",
    ...(endpoint.bearerTokenFile
      ? { authorization: { type: "Bearer", credentials_file: t.tokenFile } }
      : {}),
    ...(endpoint.tlsConfig
      ? {
        tls_config: {
          ...(tls.insecureSkipVerify !== undefined
            ? { insecure_skip_verify: tls.insecureSkipVerify }
            : {}),
          ...(tls.caFile ? { ca_file: tls.caFile } : {}),
          ...(tls.serverName ? { server_name: tls.serverName } : {}),
        },
      }
      : {}),
    static_configs: [{ targets: [t.target] }],
  };
}

/** A Prometheus server run by {@link startPrometheus}. */
export interface PrometheusServer {
  /** `http://127.0.0.1:<port>`. */
  url: string;
  /** Its stderr (logs) so far. */
  logs(): string;
  /**
   * GET `path` (e.g. `/api/v1/targets`) of the HTTP API and return `data` of the answer.
   * @throws Error on a non-200 answer or `status` other than "success"
   */
  api<T>(path: string, params?: Record<string, string | string[]>): Promise<T>;
  /** SIGTERM, SIGKILL after 30 s; resolves with the exit code. */
  stop(): Promise<number>;
}

/**
 * Starts the pinned `prometheus` with `configFile`, its TSDB in `dataDir`, its web listener on a
 * free 127.0.0.1 port, and waits (at most 60 s) until `/-/ready` answers 200.
 * @throws Error with its logs when it exits or is not ready in time (it is stopped then)
 */
export async function startPrometheus(
  configFile: string,
  dataDir: string,
): Promise<PrometheusServer> {
  const port = freePort();
  const url = `http://127.0.0.1:${port}`;
  const tool = spawnTool(`${await prometheusDir()}/prometheus`, [
    `--config.file=${configFile}`,
    `--storage.tsdb.path=${dataDir}`,
    `--web.listen-address=127.0.0.1:${port}`,
  ]);
  const server: PrometheusServer = {
    url,
    logs: tool.logs,
    async api<T>(path: string, params: Record<string, string | string[]> = {}) {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(params)) {
        for (const one of [v].flat()) q.append(k, one);
      }
      const r = await fetch(`${url}${path}${q.size ? `?${q}` : ""}`, {
        signal: AbortSignal.timeout(15_000),
      });
      const body = await r.json() as { status: string; data: T; error?: string };
      if (r.status !== 200 || body.status !== "success") {
        throw new Error(`GET ${path}: ${r.status} ${body.error ?? body.status}`);
      }
      return body.data;
    },
    stop: tool.stop,
  };
  try {
    await waitFor("Prometheus /-/ready", async () => {
      if (tool.exited()) throw new Error("exited");
      const r = await fetch(`${url}/-/ready`, { signal: AbortSignal.timeout(5_000) });
      await r.body?.cancel();
      return r.status === 200;
    }, 60_000);
  } catch (err) {
    await server.stop();
    throw new Error(
      `prometheus did not start: ${(err as Error).message}\n${tool.logs().slice(-3000)}`,
    );
  }
  return server;
}

/** One target of `/api/v1/targets` (the fields tests read). */
export interface ActiveTarget {
  labels: Record<string, string>;
  scrapePool: string;
  scrapeUrl: string;
  health: "up" | "down" | "unknown";
  lastError: string;
  lastScrape: string;
}

/** One rule of `/api/v1/rules` (the fields tests read). */
export interface LoadedRule {
  name: string;
  query: string;
  type: "alerting" | "recording";
  health: "ok" | "err" | "unknown";
  lastError?: string;
  lastEvaluation: string;
  /** Alerting rules: inactive, pending or firing. */
  state?: string;
}

/** The rules of every group Prometheus loaded, by `/api/v1/rules`. */
export async function loadedRules(p: PrometheusServer): Promise<LoadedRule[]> {
  const data = await p.api<{ groups: { rules: LoadedRule[] }[] }>("/api/v1/rules");
  return data.groups.flatMap((g) => g.rules);
}

/** Whether a rule of `/api/v1/rules` has been evaluated (Prometheus reports year 1 before). */
export const evaluated = (r: LoadedRule): boolean => !r.lastEvaluation.startsWith("0001-");
