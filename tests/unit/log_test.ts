/**
 * `--log-format`: `auto` (the default) logs JSON lines when stderr is a pipe (a container, a file)
 * and readable console lines, in colour unless `NO_COLOR` is set, when it is a terminal; `json` and `console` (flag or
 * `APPSERVICE_LOG_FORMAT`) win over it. The terminal is a real pseudo-terminal (util-linux
 * `script`).
 */
import { assert, assertEquals } from "../assert.ts";
import { FLAGS, parseFlags } from "../../lib/cli.ts";
import { consoleFormatter } from "../../lib/runtime/log.ts";
import type { LogRecord } from "@logtape/logtape";

const REPO = new URL("../../", import.meta.url).pathname;
const FIXTURE = `${REPO}tests/fixtures/print_log.ts`;
// deno-lint-ignore no-control-regex
const ANSI = /\x1b\[[0-9;]*m/g;
const CONSOLE_LINE =
  /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO controller: Starting workers controller=appservice workers=1$/;

/** Stderr of the fixture with `args` and `env`, stderr a pipe. */
async function piped(args: string[], env: Record<string, string> = {}): Promise<string> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", FIXTURE, ...args],
    env: { APPSERVICE_LOG_FORMAT: "", ...env },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stderr);
  assert(out.success, text);
  return text;
}

/** What the fixture writes on a pseudo-terminal (its stdout and stderr both on it). */
async function onTerminal(args: string[], env: Record<string, string> = {}): Promise<string> {
  const command = [Deno.execPath(), "run", "-A", FIXTURE, ...args].map((a) => `'${a}'`).join(" ");
  const out = await new Deno.Command("script", {
    args: ["-qec", command, "/dev/null"],
    env: { NO_COLOR: "", APPSERVICE_LOG_FORMAT: "", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  assert(out.success, text + new TextDecoder().decode(out.stderr));
  return text.replaceAll("\r", "");
}

/** The one log line of `text`. */
function oneLine(text: string): string {
  const lines = text.split("\n").filter((l) => l !== "");
  assertEquals(lines.length, 1, text);
  return lines[0];
}

Deno.test("log format: the flag's default is auto; json, console and the env var still parse", () => {
  assertEquals(FLAGS.find((f) => f.name === "log-format")?.default, "auto");
  const format = (argv: string[], env: Record<string, string> = {}) => {
    const r = parseFlags(argv, (n) => env[n]);
    return r.kind === "run" ? r.values["log-format"] : r.kind;
  };
  assertEquals(format([]), "auto");
  assertEquals(format(["--log-format=json"]), "json");
  assertEquals(format(["--log-format=console"]), "console");
  assertEquals(format([], { APPSERVICE_LOG_FORMAT: "console" }), "console");
  assertEquals(format(["--log-format=json"], { APPSERVICE_LOG_FORMAT: "console" }), "json");
});

Deno.test("log format auto: JSON lines when stderr is a pipe", async () => {
  const record = JSON.parse(oneLine(await piped([])));
  assertEquals([record.level, record.message, record.properties], [
    "INFO",
    "Starting workers",
    { controller: "appservice", workers: 1 },
  ]);
  // Positive control: the same pipe gives console lines when they are asked for, by env too.
  assert(CONSOLE_LINE.test(oneLine(await piped(["--log-format=console"]))));
  assert(CONSOLE_LINE.test(oneLine(await piped([], { APPSERVICE_LOG_FORMAT: "console" }))));
});

Deno.test({
  name: "log format auto: readable console lines in colour on a terminal; json when asked",
  ignore: Deno.build.os !== "linux",
  fn: async () => {
    const text = oneLine(await onTerminal([]));
    assert(ANSI.test(text), `no colour: ${JSON.stringify(text)}`);
    const plain = text.replace(ANSI, "");
    assert(CONSOLE_LINE.test(plain), JSON.stringify(plain));
    const json = JSON.parse(oneLine(await onTerminal(["--log-format=json"])));
    assertEquals(json.message, "Starting workers");
    // NO_COLOR (any non-empty value) keeps the terminal's lines plain.
    const noColor = oneLine(await onTerminal([], { NO_COLOR: "1" }));
    assert(CONSOLE_LINE.test(noColor), JSON.stringify(noColor));
  },
});

Deno.test("console format: a value with whitespace or a line break stays on one line as JSON", () => {
  const record: LogRecord = {
    category: ["appservice-operator", "controller"],
    level: "error",
    message: ["Reconciler error"],
    rawMessage: "Reconciler error",
    timestamp: Date.UTC(2026, 0, 2, 3, 4, 5, 6),
    properties: { error: "boom\n  at x", name: "a", empty: "", gone: undefined, n: 2 },
  };
  assertEquals(
    consoleFormatter(false)(record),
    '2026-01-02T03:04:05.006Z ERROR controller: Reconciler error error="boom\\n  at x" name=a ' +
      'empty="" n=2\n',
  );
});
