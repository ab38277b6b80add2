/**
 * Logging setup on LogTape: JSON lines on stderr by default (one object a line with `@timestamp`,
 * `level`, `logger`, `message` and the structured properties), or a readable console format for
 * development. Properties are key-values (`controller`, `namespace`, `name`, `reconcileID`), never
 * interpolated strings; credentials never reach a log line.
 *
 * @module
 */
import { configure, getLogger, jsonLinesFormatter, type LogRecord, reset } from "@logtape/logtape";

/** Log levels accepted by `--log-level`, lowest first (LogTape's levels). */
export const LOG_LEVELS = ["trace", "debug", "info", "warning", "error", "fatal"] as const;
/** Output formats accepted by `--log-format`. */
export const LOG_FORMATS = ["json", "console"] as const;

/** One of {@link LOG_LEVELS}. */
export type LogLevelName = typeof LOG_LEVELS[number];
/** One of {@link LOG_FORMATS}: `json` (JSON lines) or `console` (readable). */
export type LogFormat = typeof LOG_FORMATS[number];

/**
 * Key-value properties of a log record, e.g. `{ namespace: "a", name: "b" }`. Never put tokens,
 * keys or Secret data in them.
 */
export type LogProperties = Record<string, unknown>;

/**
 * A structured logger (a LogTape `Logger` seen through the methods the runtime uses): a fixed
 * message and key-value properties, never an interpolated string.
 */
export interface Logger {
  /** Logs at level debug. */
  debug(message: string, properties?: LogProperties): void;
  /** Logs at level info. */
  info(message: string, properties?: LogProperties): void;
  /** Logs at level warning. */
  warn(message: string, properties?: LogProperties): void;
  /** Logs at level error. */
  error(message: string, properties?: LogProperties): void;
  /** A logger adding `properties` to every record. */
  with(properties: LogProperties): Logger;
}

/** Default root logger category: this operator's name. */
export const DEFAULT_LOG_ROOT = "appservice-operator";

/** The root category every {@link log} is under; set by {@link setupLogging}. */
let root = DEFAULT_LOG_ROOT;

/** Readable one-line format: `time LEVEL logger: message key=value ...`. */
function consoleFormatter(record: LogRecord): string {
  const time = new Date(record.timestamp).toISOString().slice(11, 23);
  const msg = record.message.map((m) => (typeof m === "string" ? m : JSON.stringify(m))).join("");
  const props = Object.entries(record.properties)
    .map(([k, v]) => `${k}=${typeof v === "string" && !/\s/.test(v) ? v : JSON.stringify(v)}`)
    .join(" ");
  const level = record.level.toUpperCase().padEnd(7);
  return `${time} ${level} ${record.category.slice(1).join(".")}: ${msg}${
    props ? " " + props : ""
  }\n`;
}

function stderrSink(format: LogFormat) {
  const encoder = new TextEncoder();
  const formatter = format === "json" ? jsonLinesFormatter : consoleFormatter;
  return (record: Parameters<typeof formatter>[0]) => {
    const line = formatter(record);
    Deno.stderr.writeSync(encoder.encode(line.endsWith("\n") ? line : line + "\n"));
  };
}

/** Options of {@link setupLogging} beyond level and format. */
export interface LoggingOptions {
  /**
   * Root category of every logger the runtime makes (`log("manager")` logs as
   * `<root>.manager`), e.g. the name of the program using the runtime; default
   * {@link DEFAULT_LOG_ROOT}. Loggers made before the call keep the root they were made with.
   */
  root?: string;
}

/**
 * Configures LogTape once for the process.
 * @param level minimum level; @param format `json` (default) or `console`
 * @param options see {@link LoggingOptions}
 */
export async function setupLogging(
  level: LogLevelName = "info",
  format: LogFormat = "json",
  options: LoggingOptions = {},
): Promise<void> {
  root = options.root || DEFAULT_LOG_ROOT;
  await reset();
  await configure({
    reset: true,
    sinks: { stderr: stderrSink(format) },
    loggers: [
      { category: [root], sinks: ["stderr"], lowestLevel: level },
      { category: ["logtape", "meta"], sinks: ["stderr"], lowestLevel: "warning" },
    ],
  });
}

/** A logger under the root category ({@link LoggingOptions.root}), e.g. `log("controller")`. */
export function log(...category: string[]): Logger {
  return getLogger([root, ...category]);
}

/** One-line description of an error for a log property (no stack, no credentials). */
export function errorText(err: unknown): string {
  if (err instanceof Error) return `${err.name === "Error" ? "" : err.name + ": "}${err.message}`;
  return String(err);
}
