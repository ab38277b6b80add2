/**
 * {@link warmUpTls}: the entry module's first import starts exactly one ECDSA key generation (the
 * kind Deno runs off the JavaScript thread; docs/design/transport.md, "The first handshake") before
 * the modules imported after it are evaluated, and a later call from the client's credentials adds
 * none. Each case runs in a fresh process: the warm-up is once per process.
 */
import { assertEquals } from "../assert.ts";

const KUBE = new URL("../../lib/kube/", import.meta.url).href;

/** Runs `code` (an ES module) in a fresh Deno process; resolves its stdout, trimmed. */
async function runFresh(code: string): Promise<string> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--ext=ts", code],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const err = new TextDecoder().decode(out.stderr);
  if (!out.success) throw new Error(`deno eval failed: ${err}`);
  return new TextDecoder().decode(out.stdout).trim();
}

/** Prefix of each child: records every generateKey call's algorithm name, then does the real one. */
const RECORD = `
const calls: string[] = [];
const real = crypto.subtle.generateKey.bind(crypto.subtle);
(crypto.subtle as { generateKey: unknown }).generateKey = (alg: { name: string }, ...rest: unknown[]) => {
  calls.push(alg.name);
  return (real as (...a: unknown[]) => Promise<unknown>)(alg, ...rest);
};
`;

Deno.test("warm_start.ts starts one ECDSA key generation before the next import is evaluated", async () => {
  const out = await runFresh(`${RECORD}
await import("${KUBE}warm_start.ts");
const atImport = calls.length;
const { warmUpTls } = await import("${KUBE}tls_warmup.ts");
warmUpTls();
warmUpTls();
console.log(JSON.stringify({ atImport, calls }));
`);
  assertEquals(JSON.parse(out), { atImport: 1, calls: ["ECDSA"] });
});

Deno.test("warmUpTls: the credentials' first HTTP client starts it when nothing did before", async () => {
  const out = await runFresh(`${RECORD}
const { CredentialProvider } = await import("${KUBE}credentials.ts");
const before = calls.length;
const p = new CredentialProvider({
  server: "https://127.0.0.1:1",
  source: "test",
  namespace: "default",
  auth: { kind: "token", token: "t" },
} as never);
const c = await p.get();
c.release();
p.close();
console.log(JSON.stringify({ before, calls }));
`);
  assertEquals(JSON.parse(out), { before: 0, calls: ["ECDSA"] });
});

Deno.test("warmUpTls never throws, even when Web Crypto does", async () => {
  const out = await runFresh(`
(crypto.subtle as { generateKey: unknown }).generateKey = () => { throw new Error("no crypto"); };
const { warmUpTls } = await import("${KUBE}tls_warmup.ts");
warmUpTls();
(crypto.subtle as { generateKey: unknown }).generateKey = () => Promise.reject(new Error("no"));
console.log("ok");
`);
  assertEquals(out, "ok");
});
