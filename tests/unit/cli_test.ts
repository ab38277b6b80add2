import { assert, assertEquals, assertRejects } from "../assert.ts";
import {
  FLAGS,
  type FlagValues,
  helpText,
  markdownFlagTable,
  parseDurationMs,
  parseFlags,
} from "../../lib/cli.ts";
import { parseBindAddress } from "../../lib/runtime/health.ts";

Deno.test("cli: durations as Go writes them", () => {
  assertEquals(parseDurationMs("15s"), 15_000);
  assertEquals(parseDurationMs("1h30m"), 5_400_000);
  assertEquals(parseDurationMs("500ms"), 500);
  assertEquals(parseDurationMs("2"), 2_000);
  assertRejects(() => parseDurationMs("soon"), /not a duration/);
});

Deno.test("cli: defaults, env vars, flags win over env, booleans with =false", () => {
  const r = parseFlags([], () => undefined);
  assert(r.kind === "run");
  assertEquals(r.values["leader-elect"], false);
  assertEquals(r.values["reconcile-timeout"], 60_000);
  assertEquals(r.values["max-concurrent-reconciles"], 1);
  const env = (n: string) =>
    ({ APPSERVICE_LEADER_ELECT: "true", APPSERVICE_MAX_CONCURRENT_RECONCILES: "4" })[n];
  const e = parseFlags([], env);
  assert(e.kind === "run");
  assertEquals(e.values["leader-elect"], true);
  assertEquals(e.values["max-concurrent-reconciles"], 4);
  const f = parseFlags(["--leader-elect=false", "--max-concurrent-reconciles=2"], env);
  assert(f.kind === "run");
  assertEquals(f.values["leader-elect"], false);
  assertEquals(f.values["max-concurrent-reconciles"], 2);
});

Deno.test("cli: bad input is a one-line error naming the flag", async () => {
  await assertRejects(() => parseFlags(["--nope"], () => undefined), /nope/);
  await assertRejects(
    () => parseFlags(["--reconcile-timeout=soon"]),
    /--reconcile-timeout: "soon"/,
  );
  await assertRejects(
    () => parseFlags([], (n) => n === "APPSERVICE_SYNC_PERIOD" ? "x" : undefined),
    /APPSERVICE_SYNC_PERIOD/,
  );
  await assertRejects(() => parseFlags(["--log-level=loud"], () => undefined), /--log-level/);
});

Deno.test("cli: --help lists every flag with its env var and default", () => {
  const h = helpText();
  for (const f of FLAGS) {
    assert(h.includes(`--${f.name}`), f.name);
    assert(h.includes(`env ${f.env};`), f.env);
  }
  assertEquals(parseFlags(["--help"]).kind, "help");
  assertEquals(parseFlags(["--version"]).kind, "version");
});

Deno.test("cli: bind addresses as controller-runtime takes them", () => {
  assertEquals(parseBindAddress(":8080"), { hostname: "0.0.0.0", port: 8080 });
  assertEquals(parseBindAddress("127.0.0.1:0"), { hostname: "127.0.0.1", port: 0 });
  assertEquals(parseBindAddress("[::1]:9"), { hostname: "::1", port: 9 });
  assertEquals(parseBindAddress("0"), undefined);
  assertRejects(() => parseBindAddress("8080"), /not host:port/);
});

Deno.test("cli: the flag table of docs/operations.md is the one the flag table generates", () => {
  const doc = Deno.readTextFileSync(new URL("../../docs/operations.md", import.meta.url));
  const start = doc.indexOf("\n## Flags\n");
  assert(start >= 0, "docs/operations.md has no Flags section");
  const section = doc.slice(start);
  /** The cells of the table rows of `text`, up to its next section. */
  const rows = (text: string) => {
    const end = text.indexOf("\n## ", 1);
    return (end < 0 ? text : text.slice(0, end)).split("\n")
      .filter((l) => l.startsWith("| `--"))
      .map((l) => l.split("|").slice(1, -1).map((c) => c.trim()));
  };
  assertEquals(
    rows(section),
    rows(markdownFlagTable()),
    "docs/operations.md's flag table is stale; print the new one with\n" +
      `  deno eval 'import { markdownFlagTable } from "./lib/cli.ts"; ` +
      `console.log(markdownFlagTable())' | deno fmt --ext md -`,
  );
});

Deno.test("cli: parsed values are typed from the table (no casts needed)", () => {
  const r = parseFlags(
    ["--log-level=debug", "--sync-period=1m", "--leader-elect"],
    () => undefined,
  );
  assert(r.kind === "run");
  const v: FlagValues = r.values;
  const level: "trace" | "debug" | "info" | "warning" | "error" | "fatal" = v["log-level"];
  const syncMs: number = v["sync-period"];
  const elect: boolean = v["leader-elect"];
  const ns: string = v["watch-namespace"];
  assertEquals([level, syncMs, elect, ns], ["debug", 60_000, true, ""]);
  assertRejects(() => parseFlags(["--log-format=xml"], () => undefined), /json, console/);
  assert(helpText().includes("--log-level <trace|debug|info|warning|error|fatal>"));
});
