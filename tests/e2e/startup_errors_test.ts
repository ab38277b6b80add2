/**
 * Start-up failures end with one line on stderr naming the problem and a non-zero exit, never a
 * stack trace (S12: never a silent fall back to anonymous).
 */
import { assert, assertEquals } from "../assert.ts";
import { cluster, freePort, REPO, startPermissionFlags } from "./harness.ts";
import { parse as parseYaml, stringify } from "yaml";

async function runOperator(args: string[], env: Record<string, string> = {}) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      ...(await startPermissionFlags()),
      `${REPO}/main.ts`,
      "--health-probe-bind-address=0",
      "--metrics-bind-address=0",
      ...args,
    ],
    env: { KUBECONFIG: "", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, stderr: new TextDecoder().decode(out.stderr).trim() };
}

function assertOneLine(stderr: string, pattern: RegExp) {
  const lines = stderr.split("\n").filter((l) => l.trim() !== "");
  assertEquals(lines.length, 1, `expected one line, got:\n${stderr}`);
  assert(lines[0].startsWith("error: "), lines[0]);
  assert(pattern.test(lines[0]), `${lines[0]} does not match ${pattern}`);
  assert(!/\bat .*\.ts:\d+/.test(stderr), "stack trace printed");
}

Deno.test("start-up errors: one line, non-zero exit", async (t) => {
  const info = await cluster();
  const dir = await Deno.makeTempDir({ prefix: "badcfg-" });
  try {
    // deno-lint-ignore no-explicit-any
    const good = parseYaml(await Deno.readTextFile(info.kubeconfig)) as any;

    await t.step("unreachable apiserver", async () => {
      const cfg = structuredClone(good);
      cfg.clusters[0].cluster.server = `https://127.0.0.1:${freePort()}`;
      await Deno.writeTextFile(`${dir}/unreachable.yaml`, stringify(cfg));
      const r = await runOperator([`--kubeconfig=${dir}/unreachable.yaml`]);
      assert(r.code !== 0);
      assertOneLine(r.stderr, /cannot reach the apiserver https:\/\/127\.0\.0\.1:\d+/);
    });

    await t.step("malformed kubeconfig", async () => {
      await Deno.writeTextFile(`${dir}/malformed.yaml`, "apiVersion: v1\nclusters: [ {name: x\n");
      const r = await runOperator([`--kubeconfig=${dir}/malformed.yaml`]);
      assert(r.code !== 0);
      assertOneLine(r.stderr, /malformed\.yaml is not valid YAML/);
    });

    await t.step("missing kubeconfig file", async () => {
      const r = await runOperator([`--kubeconfig=${dir}/absent.yaml`]);
      assert(r.code !== 0);
      assertOneLine(r.stderr, /cannot read kubeconfig .*absent\.yaml: no such file/);
    });

    await t.step("a user without any credential is refused, not used anonymously", async () => {
      const cfg = structuredClone(good);
      cfg.users[0].user = {};
      await Deno.writeTextFile(`${dir}/anon.yaml`, stringify(cfg));
      const r = await runOperator([`--kubeconfig=${dir}/anon.yaml`]);
      assert(r.code !== 0);
      assertOneLine(r.stderr, /no credential .* refusing to connect anonymously/);
    });

    await t.step("a token the apiserver rejects", async () => {
      const cfg = structuredClone(good);
      cfg.users[0].user = { token: "not-a-valid-token" };
      await Deno.writeTextFile(`${dir}/badtoken.yaml`, stringify(cfg));
      const r = await runOperator([`--kubeconfig=${dir}/badtoken.yaml`]);
      assert(r.code !== 0);
      assertOneLine(
        r.stderr,
        /rejected the credential of kubeconfig .*badtoken\.yaml.*401 Unauthorized/,
      );
    });

    // The probe or metrics port is taken (a second operator, the example controller): the last
    // line names the address and the flag to change (after the `Connected` log line).
    for (const which of ["health-probe-bind-address", "metrics-bind-address"]) {
      await t.step(`--${which} in use`, async () => {
        const taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
        try {
          const port = (taken.addr as Deno.NetAddr).port;
          const r = await runOperator([
            `--kubeconfig=${info.kubeconfig}`,
            `--${which}=127.0.0.1:${port}`,
            "--metrics-secure=false",
          ]);
          assert(r.code !== 0);
          const last = r.stderr.split("\n").at(-1) ?? "";
          assert(
            last.startsWith(`error: cannot listen on 127.0.0.1:${port} `) &&
              last.includes("address already in use") && last.includes(`--${which}`),
            `last line: ${last}`,
          );
          assert(!/\bat .*\.ts:\d+/.test(r.stderr), "stack trace printed");
        } finally {
          taken.close();
        }
      });
    }

    await t.step("an unknown flag", async () => {
      const r = await runOperator(["--frobnicate"]);
      assert(r.code !== 0);
      assertOneLine(r.stderr, /frobnicate/);
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
