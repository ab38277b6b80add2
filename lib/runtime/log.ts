/**
 * Logging setup on LogTape, on stderr: JSON lines (one object a line with `@timestamp`, `level`,
 * `logger`, `message` and the structured properties), or readable console lines (LogTape's text
 * formatter, in colour on a terminal unless `NO_COLOR` is set); by default console when stderr is a terminal and JSON
 * otherwise (a container, a pipe, a file), as kubebuilder's scaffold logs readable lines in
 * development and JSON in production. Properties are key-values (`controller`, `namespace`, `name`, `reconcileID`), never
 * interpolated strings; credentials never reach a log line.
 *
 * @module
 */
import {
  configure,
  getAnsiColorFormatter,
  getLogger,
  getTextFormatter,
  jsonLinesFormatter,
  type LogRecord,
  reset,
  type TextFormatter,
  type TextFormatterOptions,
} from "@logtape/logtape";

/** Log levels accepted by `--log-level`, lowest first (LogTape's levels). */
export const LOG_LEVELS = ["trace", "debug", "info", "warning", "error", "fatal"] as const;
/** The output formats: `json` (JSON lines) and `console` (readable). */
export const LOG_FORMATS = ["json", "console"] as const;
/**
 * Values of `--log-format`: a format of {@link LOG_FORMATS}, or `auto` (the default): `console`
 * when stderr is a terminal, else `json` ({@link defaultLogFormat}).
 */
export const LOG_FORMAT_CHOICES = ["auto", ...LOG_FORMATS] as const;

/** One of {@link LOG_LEVELS}. */
export type LogLevelName = typeof LOG_LEVELS[number];
/** One of {@link LOG_FORMATS}: `json` (JSON lines) or `console` (readable). */
export type LogFormat = typeof LOG_FORMATS[number];
/** One of {@link LOG_FORMAT_CHOICES}: a {@link LogFormat} or `auto`. */
export type LogFormatChoice = typeof LOG_FORMAT_CHOICES[number];

/**
 * The format `auto` stands for: `console` when stderr (where the logs go) is a terminal, else
 * `json`.
 */
export function defaultLogFormat(): LogFormat {
  return Deno.stderr.isTerminal() ? "console" : "json";
}

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

/**
 * A record's properties as ` key=value ...`: a string without whitespace as is, anything else as
 * JSON (so a line break in a value never breaks the line); "" when it has none.
 */
function propertiesText(properties: Record<string, unknown>): string {
  const pairs = Object.entries(properties).filter(([, v]) => v !== undefined).map(([k, v]) =>
    `${k}=${typeof v === "string" && v !== "" && !/\s/.test(v) ? v : JSON.stringify(v)}`
  );
  return pairs.length ? " " + pairs.join(" ") : "";
}

/**
 * The readable one-line format, `<RFC 3339 time> <LEVEL> <logger>: <message> key=value ...`
 * (the logger without the root category), from LogTape's text formatter: with ANSI colours when
 * `colors` (a terminal), plain otherwise.
 */
export function consoleFormatter(colors: boolean): TextFormatter {
  const options: TextFormatterOptions = {
    timestamp: "rfc3339",
    level: "FULL",
    category: (category) => category.slice(1).join("."),
    format: ({ timestamp, level, category, message, record }) =>
      `${timestamp} ${level} ${category}: ${message}${propertiesText(record.properties)}`,
  };
  return colors ? getAnsiColorFormatter(options) : getTextFormatter(options);
}

function stderrSink(format: LogFormat) {
  const encoder = new TextEncoder();
  const formatter = format === "json"
    ? jsonLinesFormatter
    : consoleFormatter(Deno.stderr.isTerminal() && !Deno.noColor);
  return (record: LogRecord) => {
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
 * @param level minimum level
 * @param format `json`, `console`, or `auto` (the default): {@link defaultLogFormat}
 * @param options see {@link LoggingOptions}
 */
export async function setupLogging(
  level: LogLevelName = "info",
  format: LogFormatChoice = "auto",
  options: LoggingOptions = {},
): Promise<void> {
  root = options.root || DEFAULT_LOG_ROOT;
  if (format === "auto") format = defaultLogFormat();
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
