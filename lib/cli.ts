/**
 * Command-line flags of the operator: one table gives each flag's name (controller-runtime's
 * names where they exist), its environment variable, kind, default and help, so parsing,
 * `--help` and docs/operations.md agree, and the type of each parsed value is inferred from the table
 * ({@link FlagValues}: `values["leader-elect"]` is a boolean, `values["sync-period"]` a number of
 * ms, `values["log-level"]` one of {@link LOG_LEVELS}). Flags win over environment variables,
 * which win over defaults.
 *
 * @module
 */
import { parseArgs } from "node:util";
import denoJson from "../deno.json" with { type: "json" };
import { LOG_FORMAT_CHOICES, LOG_LEVELS } from "./runtime/log.ts";

/** The operator's version, from deno.json. */
export const VERSION: string = denoJson.version;

/**
 * How a flag's text is parsed: `string` as is; `boolean` true/false (also 1/0, yes/no, and
 * `--flag`/`--no-flag`); `duration` a Go duration (`15s`, `1h30m`, `500ms`; a bare number is
 * seconds) into ms; `int` a whole number ≥ 0; `number` a finite number ≥ 0; `enum` one of
 * `choices`.
 */
export type FlagKind = "string" | "boolean" | "duration" | "int" | "number" | "enum";

/** One flag of the table. */
export interface FlagSpec {
  /** Name without dashes, e.g. `leader-elect`. */
  name: string;
  /** Environment variable read when the flag is absent, e.g. `APPSERVICE_LEADER_ELECT`. */
  env: string;
  /** How the value is parsed; see {@link FlagKind}. */
  kind: FlagKind;
  /** Allowed values of an `enum` flag. */
  choices?: readonly string[];
  /** Smallest and largest value of an `int` flag (inclusive); default ≥ 0. */
  range?: readonly [number, number];
  /** Default, as text in the flag's own syntax ("" for none). */
  default: string;
  /** One line for `--help` and docs/operations.md. */
  help: string;
}

/**
 * The flag table with its literal types kept, so that {@link FlagValues} is inferred from it;
 * {@link FLAGS} is the same table seen as {@link FlagSpec}s.
 */
export const FLAG_TABLE = [
  {
    name: "kubeconfig",
    env: "KUBECONFIG",
    kind: "string",
    default: "",
    help:
      "Path to a kubeconfig; KUBECONFIG may list several, merged as kubectl does. Unset: in-cluster, then ~/.kube/config.",
  },
  {
    name: "context",
    env: "APPSERVICE_CONTEXT",
    kind: "string",
    default: "",
    help: "kubeconfig context to use instead of current-context.",
  },
  {
    name: "metrics-bind-address",
    env: "APPSERVICE_METRICS_BIND_ADDRESS",
    kind: "string",
    default: "",
    help:
      "Address of /metrics (host:port, :port, or 0 to disable); unset: :8443 with --metrics-secure, :8080 without.",
  },
  {
    name: "metrics-secure",
    env: "APPSERVICE_METRICS_SECURE",
    kind: "boolean",
    default: "true",
    help:
      "Serve /metrics over HTTPS, each request authenticated (TokenReview) and authorized (SubjectAccessReview, get /metrics); false: plain HTTP.",
  },
  {
    name: "metrics-cert-dir",
    env: "APPSERVICE_METRICS_CERT_DIR",
    kind: "string",
    default: "",
    help:
      "Folder with tls.crt and tls.key for --metrics-secure, re-read every 10s; unset: a self-signed certificate made at start.",
  },
  {
    name: "health-probe-bind-address",
    env: "APPSERVICE_HEALTH_PROBE_BIND_ADDRESS",
    kind: "string",
    default: ":8081",
    help: "Address of /healthz and /readyz (host:port, :port, or 0 to disable).",
  },
  {
    name: "leader-elect",
    env: "APPSERVICE_LEADER_ELECT",
    kind: "boolean",
    default: "false",
    help: "Reconcile only while holding a coordination.k8s.io Lease (run several replicas safely).",
  },
  {
    name: "leader-election-namespace",
    env: "APPSERVICE_LEADER_ELECTION_NAMESPACE",
    kind: "string",
    default: "",
    help: "Namespace of the Lease; default the service account's (in cluster) or the context's.",
  },
  {
    name: "leader-election-id",
    env: "APPSERVICE_LEADER_ELECTION_ID",
    kind: "string",
    default: "appservice-operator.apps.our-org.com",
    help: "Name of the Lease.",
  },
  {
    name: "leader-elect-lease-duration",
    env: "APPSERVICE_LEADER_ELECT_LEASE_DURATION",
    kind: "duration",
    default: "15s",
    help: "How long a Lease is valid without renewal (client-go default 15s).",
  },
  {
    name: "leader-elect-renew-deadline",
    env: "APPSERVICE_LEADER_ELECT_RENEW_DEADLINE",
    kind: "duration",
    default: "10s",
    help:
      "A leader that cannot renew within this stops all writes and exits 1 (client-go default 10s).",
  },
  {
    name: "leader-elect-retry-period",
    env: "APPSERVICE_LEADER_ELECT_RETRY_PERIOD",
    kind: "duration",
    default: "2s",
    help: "Interval between Lease attempts (client-go default 2s).",
  },
  {
    name: "shards",
    env: "APPSERVICE_SHARDS",
    kind: "int",
    range: [1, 256],
    default: "1",
    help:
      "Share the namespaces among the replicas in this many shards, a Lease each (1..256; 1: one Lease, --leader-elect).",
  },
  {
    name: "max-concurrent-reconciles",
    env: "APPSERVICE_MAX_CONCURRENT_RECONCILES",
    kind: "int",
    default: "1",
    help: "AppServices reconciled in parallel (controller-runtime default 1).",
  },
  {
    name: "reconcile-timeout",
    env: "APPSERVICE_RECONCILE_TIMEOUT",
    kind: "duration",
    default: "60s",
    help: "Bound of one reconcile; it is aborted and retried with backoff after this (0: none).",
  },
  {
    name: "sync-period",
    env: "APPSERVICE_SYNC_PERIOD",
    kind: "duration",
    default: "10h",
    help: "Every AppService is reconciled again this often (controller-runtime default 10h).",
  },
  {
    name: "graceful-shutdown-timeout",
    env: "APPSERVICE_GRACEFUL_SHUTDOWN_TIMEOUT",
    kind: "duration",
    default: "30s",
    help: "On SIGTERM, how long in-flight reconciles may finish before the Lease is released.",
  },
  {
    name: "watch-namespace",
    env: "APPSERVICE_WATCH_NAMESPACE",
    kind: "string",
    default: "",
    help: "Watch only these namespaces, comma-separated (default: all namespaces).",
  },
  {
    name: "watch-idle-timeout",
    env: "APPSERVICE_WATCH_IDLE_TIMEOUT",
    kind: "duration",
    default: "75s",
    help:
      "A watch that delivers no byte for this long is reconnected (the apiserver sends a bookmark about every 60s); below 65s a silence never counts as a missed bookmark.",
  },
  {
    name: "list-page-size",
    env: "APPSERVICE_LIST_PAGE_SIZE",
    kind: "number",
    default: "500",
    help:
      "Objects per page of the informers' lists (client-go's pager default 500); a list whose continue token expires is read again in one piece.",
  },
  {
    name: "watch-list",
    env: "APPSERVICE_WATCH_LIST",
    kind: "boolean",
    default: "false",
    help:
      "Initial state by WatchList (sendInitialEvents, consistent, from the watch cache) instead of consistent paged lists.",
  },
  {
    name: "kube-api-qps",
    env: "APPSERVICE_KUBE_API_QPS",
    kind: "number",
    default: "0",
    help:
      "Client-side limit of apiserver requests per second (0: none; the apiserver's APF still applies).",
  },
  {
    name: "kube-api-burst",
    env: "APPSERVICE_KUBE_API_BURST",
    kind: "int",
    default: "0",
    help: "Client-side burst (default 2 × qps).",
  },
  {
    name: "log-level",
    env: "APPSERVICE_LOG_LEVEL",
    kind: "enum",
    choices: LOG_LEVELS,
    default: "info",
    help: `Lowest level logged: ${LOG_LEVELS.join(", ")}.`,
  },
  {
    name: "log-format",
    env: "APPSERVICE_LOG_FORMAT",
    kind: "enum",
    choices: LOG_FORMAT_CHOICES,
    default: "auto",
    help: "Log format: json (JSON lines), console (readable) or auto (console when stderr is a " +
      "terminal, else json).",
  },
] as const satisfies readonly FlagSpec[];

/** Every flag, in `--help` order. */
export const FLAGS: readonly FlagSpec[] = FLAG_TABLE;

/**
 * Parses a Go-style duration (`1h30m`, `15s`, `500ms`) or a bare number of seconds into ms.
 * @throws Error naming the value when malformed.
 */
export function parseDurationMs(value: string): number {
  const v = value.trim();
  if (/^\d+(\.\d+)?$/.test(v)) return Number(v) * 1000;
  const unit: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
  let total = 0;
  let rest = v;
  if (!rest) throw new Error(`"${value}" is not a duration`);
  while (rest) {
    const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)/.exec(rest);
    if (!m) throw new Error(`"${value}" is not a duration (e.g. 15s, 2m, 500ms)`);
    total += Number(m[1]) * unit[m[2]];
    rest = rest.slice(m[0].length);
  }
  return total;
}

/** The type a flag of kind `K` (with `choices` `C` for an enum) parses to. */
export type FlagValue<K extends FlagKind, C = never> = K extends "boolean" ? boolean
  : K extends "duration" | "int" | "number" ? number
  : K extends "enum" ? C
  : string;

/** One flag's parsed type, from its table entry (an enum's choices, else by its kind). */
export type ValueOfSpec<F> = F extends { kind: "enum"; choices: readonly (infer C)[] } ? C
  : F extends { kind: infer K extends FlagKind } ? FlagValue<K>
  : never;

/**
 * Parsed flag values keyed by flag name, typed from {@link FLAGS}: booleans, numbers (durations
 * in ms), enum members or strings.
 */
export type FlagValues = {
  -readonly [F in typeof FLAG_TABLE[number] as F["name"]]: ValueOfSpec<F>;
};

/** Result of {@link parseFlags}. */
export type ParsedArgs =
  | { kind: "run"; values: FlagValues }
  | { kind: "help" }
  | { kind: "version" };

/**
 * Parses argv and the environment.
 * @throws Error with a one-line message for unknown flags or malformed values.
 */
export function parseFlags(
  argv: string[],
  env: (name: string) => string | undefined = (n) => Deno.env.get(n),
): ParsedArgs {
  const options: Record<string, { type: "string" | "boolean" }> = {
    help: { type: "boolean" },
    version: { type: "boolean" },
  };
  for (const f of FLAGS) options[f.name] = { type: f.kind === "boolean" ? "boolean" : "string" };
  // Accept --flag=false for booleans, as Go's flag package does.
  const normalized: string[] = [];
  for (const a of argv) {
    const m = /^--([a-z-]+)=(true|false)$/.exec(a);
    const spec = m && FLAGS.find((f) => f.name === m[1] && f.kind === "boolean");
    if (spec) normalized.push(m![2] === "true" ? `--${m![1]}` : `--no-${m![1]}`);
    else normalized.push(a);
  }
  for (const f of FLAGS) if (f.kind === "boolean") options[`no-${f.name}`] = { type: "boolean" };
  let parsed;
  try {
    parsed = parseArgs({ args: normalized, options, strict: true, allowPositionals: false });
  } catch (err) {
    throw new Error(String((err as Error).message).split("\n")[0]);
  }
  const v = parsed.values as Record<string, string | boolean | undefined>;
  if (v.help) return { kind: "help" };
  if (v.version) return { kind: "version" };
  const values: Record<string, string | number | boolean> = {};
  for (const f of FLAGS) {
    let raw: string | boolean | undefined = v[f.name];
    if (f.kind === "boolean" && v[`no-${f.name}`]) raw = false;
    const source = raw !== undefined ? `--${f.name}` : `${f.env}`;
    if (raw === undefined) raw = env(f.env);
    if (raw === undefined || raw === "") raw = f.default;
    try {
      switch (f.kind) {
        case "boolean":
          if (typeof raw === "boolean") values[f.name] = raw;
          else if (/^(true|1|yes)$/i.test(raw)) values[f.name] = true;
          else if (/^(false|0|no|)$/i.test(raw)) values[f.name] = false;
          else throw new Error(`"${raw}" is not true or false`);
          break;
        case "duration":
          values[f.name] = parseDurationMs(String(raw));
          break;
        case "int": {
          const n = Number(raw);
          if (!Number.isInteger(n) || n < 0) throw new Error(`"${raw}" is not a whole number`);
          if (f.range && (n < f.range[0] || n > f.range[1])) {
            throw new Error(`"${raw}" is not from ${f.range[0]} to ${f.range[1]}`);
          }
          values[f.name] = n;
          break;
        }
        case "number": {
          const n = Number(raw);
          if (!Number.isFinite(n) || n < 0) throw new Error(`"${raw}" is not a number`);
          values[f.name] = n;
          break;
        }
        case "enum":
          if (!f.choices?.includes(String(raw))) {
            throw new Error(`"${raw}" is not one of ${f.choices?.join(", ")}`);
          }
          values[f.name] = String(raw);
          break;
        default:
          values[f.name] = String(raw);
      }
    } catch (err) {
      throw new Error(`${source}: ${(err as Error).message}`);
    }
  }
  // Every flag of the table was parsed by its kind just above: the shapes FlagValues names.
  return { kind: "run", values: values as FlagValues };
}

/** The `--help` text: usage and every flag with its env var and default. */
export function helpText(): string {
  const lines = [
    `appservice-operator ${VERSION}: keeps Pods and a Service matching each AppService (apps.our-org.com/v1).`,
    "",
    "Usage: appservice-operator [flags]",
    "",
    "Flags (each also read from the environment variable shown):",
  ];
  for (const f of FLAGS) {
    const type = f.kind === "boolean" ? "" : ` <${f.choices?.join("|") ?? f.kind}>`;
    lines.push(`  --${f.name}${type}`);
    lines.push(`      ${f.help}`);
    lines.push(`      env ${f.env}; default ${f.default === "" ? '""' : f.default}`);
  }
  lines.push("  --help        Print this help.", "  --version     Print the version.");
  return lines.join("\n");
}

/**
 * The flag table of docs/operations.md (GitHub markdown, one row per flag in {@link FLAGS} order: flag, env,
 * default, what), as tests/unit/cli_test.ts compares it with docs/operations.md.
 */
export function markdownFlagTable(): string {
  const code = (v: string) => v === "" ? "" : `\`${v}\``;
  const rows = [
    "| flag | env | default | what |",
    "| --- | --- | --- | --- |",
    ...FLAGS.map((f) =>
      `| ${code(`--${f.name}`)} | ${code(f.env)} | ${code(f.default)} | ${f.help} |`
    ),
  ];
  return rows.join("\n");
}
