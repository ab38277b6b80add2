/**
 * `require_pin` of lib/testing/build_common.sh (the check that a Go module pins exactly the version
 * a build script keys its cache by), run by bash on temporary go.mod files: the exact version in a
 * `require` line or block passes; a longer version (v1.36.30 for v1.36.3), a version whose dots
 * are other characters, a module whose path only ends with the one asked for, and the version in
 * a `replace` or `exclude` do not. Also: the pins of lib/testing/build and tests/cluster/build
 * (the real go.mod files) pass.
 */
import { assertEquals } from "../assert.ts";

const COMMON = new URL("../../lib/testing/build_common.sh", import.meta.url).pathname;
const ROOT = new URL("../..", import.meta.url).pathname;

/** Exit code and stderr of `require_pin GO_MOD PIN` in bash, `die` printing and exiting 1. */
async function requirePin(goMod: string, pin: string): Promise<{ code: number; err: string }> {
  const script = `set -euo pipefail
die() { echo "die: $*" >&2; exit 1; }
source "$1"
require_pin "$2" "$3"`;
  const out = await new Deno.Command("bash", {
    args: ["-c", script, "bash", COMMON, goMod, pin],
    stdout: "null",
    stderr: "piped",
  }).output();
  return { code: out.code, err: new TextDecoder().decode(out.stderr).trim() };
}

/** Writes `text` as a go.mod in a new temporary folder; returns its path. */
async function goMod(text: string): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "require-pin-" });
  await Deno.writeTextFile(`${dir}/go.mod`, text);
  return `${dir}/go.mod`;
}

const PIN = "k8s.io/kubernetes v1.36.3";

Deno.test("require_pin: the exact version in a require line or block passes", async () => {
  const cases = [
    "module m\n\ngo 1.25\n\nrequire k8s.io/kubernetes v1.36.3\n",
    "module m\n\nrequire (\n\tk8s.io/api v0.36.3\n\tk8s.io/kubernetes v1.36.3\n)\n",
    "module m\n\nrequire (\n\tk8s.io/kubernetes v1.36.3 // indirect\n)\n",
  ];
  for (const text of cases) {
    const file = await goMod(text);
    try {
      assertEquals(await requirePin(file, PIN), { code: 0, err: "" }, text);
    } finally {
      await Deno.remove(file.replace(/\/go\.mod$/, ""), { recursive: true });
    }
  }
});

Deno.test("require_pin: a longer version, other characters for the dots, a longer module path, a replace or exclude fail", async () => {
  const cases = [
    "module m\n\nrequire k8s.io/kubernetes v1.36.30\n",
    "module m\n\nrequire (\n\tk8s.io/kubernetes v1.36.30\n)\n",
    "module m\n\nrequire k8s.io/kubernetes v1x36x3\n",
    "module m\n\nrequire example.com/k8s.io/kubernetes v1.36.3\n",
    "module m\n\nrequire xk8s.io/kubernetes v1.36.3\n",
    "module m\n\nrequire k8s.io/kubernetes v1.36.2\n\nreplace k8s.io/kubernetes v1.36.3 => ../k\n",
    "module m\n\nrequire k8s.io/kubernetes v1.36.2\n\nreplace (\n\tk8s.io/kubernetes v1.36.3 => ../k\n)\n",
    "module m\n\nrequire k8s.io/kubernetes v1.36.2\n\nexclude (\n\tk8s.io/kubernetes v1.36.3\n)\n",
    "module m\n",
  ];
  for (const text of cases) {
    const file = await goMod(text);
    try {
      assertEquals(
        await requirePin(file, PIN),
        { code: 1, err: `die: ${file} does not pin ${PIN}` },
        text,
      );
    } finally {
      await Deno.remove(file.replace(/\/go\.mod$/, ""), { recursive: true });
    }
  }
});

Deno.test("require_pin: the repository's build scripts' pins pass", async () => {
  const pins: [string, RegExp, string][] = [
    ["lib/testing/build.sh", /K8S_VERSION=(\S+)/, "lib/testing/build/kube/go.mod"],
    ["tests/cluster/build_helm.sh", /HELM_VERSION=(\S+)/, "tests/cluster/build/helm/go.mod"],
  ];
  const modules: Record<string, string> = {
    "lib/testing/build/kube/go.mod": "k8s.io/kubernetes",
    "tests/cluster/build/helm/go.mod": "helm.sh/helm/v4",
  };
  for (const [script, versionRe, mod] of pins) {
    const version = (await Deno.readTextFile(ROOT + script)).match(versionRe)?.[1];
    assertEquals(typeof version, "string", `no version in ${script}`);
    const pin = `${modules[mod]} ${version}`;
    assertEquals(await requirePin(ROOT + mod, pin), { code: 0, err: "" }, pin);
    // Positive control of the failing case on the same file: one more digit fails.
    assertEquals((await requirePin(ROOT + mod, `${pin}0`)).code, 1, `${pin}0`);
  }
});
