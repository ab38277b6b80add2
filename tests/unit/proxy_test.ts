/**
 * The choice of proxy for the apiserver (lib/kube/proxy.ts): Go's `httpproxy` rules as client-go
 * applies them. Example cases, then properties over generated hosts, ports and NO_PROXY lists.
 */
import fc from "fast-check";
import { assert, assertEquals } from "../assert.ts";
import {
  chooseProxy,
  describeProxy,
  isLoopbackHost,
  noProxyMatches,
  parseIPv6,
  parseProxyUrl,
  type ProxyEnvironment,
  readProxyEnvironment,
} from "../../lib/kube/proxy.ts";

const env = (vars: Record<string, string>): ProxyEnvironment =>
  readProxyEnvironment((n) => vars[n]);

Deno.test("proxy: loopback apiservers are never proxied", () => {
  const e = env({ HTTPS_PROXY: "http://127.0.0.1:9", HTTP_PROXY: "http://127.0.0.1:9" });
  for (
    const s of [
      "https://127.0.0.1:6443",
      "https://127.9.8.7",
      "https://localhost:6443",
      "https://[::1]:6443",
      "http://127.0.0.1:8080",
      "https://[::ffff:127.0.0.1]:6443",
    ]
  ) {
    const p = chooseProxy(s, undefined, e);
    assertEquals(p.url, undefined, s);
    assert(describeProxy(p).startsWith("direct"), describeProxy(p));
  }
  assertEquals(chooseProxy("https://10.0.0.1:6443", undefined, e).url, "http://127.0.0.1:9");
  assertEquals(chooseProxy("https://128.0.0.1", undefined, e).url, "http://127.0.0.1:9");
});

Deno.test("proxy: HTTPS_PROXY for https, HTTP_PROXY for http, upper case first, empty is unset", () => {
  const e = env({
    HTTPS_PROXY: "https-upper:3128",
    https_proxy: "http://https-lower:3128",
    http_proxy: "http://http-lower:8080",
    HTTP_PROXY: "",
  });
  const https = chooseProxy("https://api.example.com", undefined, e);
  assertEquals(https.url, "http://https-upper:3128");
  assertEquals(https.source, "HTTPS_PROXY");
  const http = chooseProxy("http://api.example.com", undefined, e);
  assertEquals(http.url, "http://http-lower:8080");
  assertEquals(http.source, "http_proxy");
  assertEquals(chooseProxy("https://x", undefined, env({})).url, undefined);
});

Deno.test("proxy: the kubeconfig proxy-url wins, NO_PROXY and loopback notwithstanding", () => {
  const e = env({ HTTPS_PROXY: "http://env:1", NO_PROXY: "*" });
  const p = chooseProxy("https://127.0.0.1:6443", "http://user:p%40ss@kc-proxy:3128", e);
  assertEquals(p.url, "http://kc-proxy:3128");
  assertEquals(p.basicAuth, { username: "user", password: "p@ss" });
  assertEquals(p.source, "kubeconfig proxy-url");
  assert(!describeProxy(p).includes("p@ss"), "no password in logs");
});

Deno.test("proxy: a proxy URL with an unsupported scheme is refused", () => {
  let err: unknown;
  try {
    parseProxyUrl("ftp://x:21", "HTTPS_PROXY");
  } catch (e) {
    err = e;
  }
  assert(err instanceof Error && /HTTPS_PROXY .*not supported/.test(err.message), String(err));
  assertEquals(parseProxyUrl("socks5://s:1080", "x").url, "socks5://s:1080");
});

Deno.test("proxy: NO_PROXY entries (Go's rules)", () => {
  const cases: [string, string, string, boolean][] = [
    // [NO_PROXY, host, port, exempt]
    ["*", "anything.example", "443", true],
    ["example.com", "example.com", "443", true],
    ["example.com", "api.example.com", "443", true],
    ["example.com", "notexample.com", "443", false],
    [".example.com", "example.com", "443", false],
    [".example.com", "api.example.com", "443", true],
    ["*.example.com", "api.example.com", "443", true],
    ["example.com:6443", "example.com", "6443", true],
    ["example.com:6443", "example.com", "443", false],
    ["EXAMPLE.com", "api.Example.COM", "443", true],
    ["10.0.0.0/8", "10.1.2.3", "6443", true],
    ["10.0.0.0/8", "11.1.2.3", "6443", false],
    ["10.0.0.1", "10.0.0.1", "6443", true],
    ["10.0.0.1:6443", "10.0.0.1", "443", false],
    ["fd00::/8", "[fd12::1]", "6443", true],
    ["fd00::/8", "[fe80::1]", "6443", false],
    ["[fd12::1]:6443", "[fd12::1]", "6443", true],
    ["fd12::1", "[fd12::1]", "6443", true],
    [" a.com , b.com ", "x.b.com", "443", true],
    ["", "example.com", "443", false],
    ["example.com", "10.0.0.1", "443", false],
  ];
  for (const [np, host, port, want] of cases) {
    assertEquals(noProxyMatches(np, host, port), want, `NO_PROXY=${np} host=${host}:${port}`);
  }
  const e = env({ HTTPS_PROXY: "http://p:1", no_proxy: ".corp" });
  const direct = chooseProxy("https://api.corp:6443", undefined, e);
  assertEquals(direct.url, undefined);
  assertEquals(direct.reason, "no_proxy matches");
});

const label = fc.stringMatching(/^[a-z][a-z0-9-]{0,8}[a-z0-9]$/);
const domain = fc.array(label, { minLength: 1, maxLength: 4 }).map((l) => l.join("."));
const port = fc.integer({ min: 1, max: 65535 }).map(String);
const ipv4 = fc.tuple(
  fc.integer({ min: 0, max: 255 }),
  fc.integer({ min: 0, max: 255 }),
  fc.integer({ min: 0, max: 255 }),
  fc.integer({ min: 0, max: 255 }),
).map((p) => p.join("."));

Deno.test("proxy properties: a domain entry matches itself and every subdomain, a dotted one only subdomains", () => {
  fc.assert(fc.property(domain, label, port, (d, sub, p) => {
    assert(noProxyMatches(d, d, p));
    assert(noProxyMatches(d, `${sub}.${d}`, p));
    assert(!noProxyMatches(`.${d}`, d, p));
    assert(noProxyMatches(`.${d}`, `${sub}.${d}`, p));
    // A suffix that is not at a label boundary never matches.
    assert(!noProxyMatches(d, `${sub}${d}`, p));
  }));
});

Deno.test("proxy properties: a port restricts an entry to that port; `*` anywhere alone matches all", () => {
  fc.assert(fc.property(domain, port, port, (d, p, q) => {
    assertEquals(noProxyMatches(`${d}:${p}`, d, q), p === q);
    assert(noProxyMatches(`other.invalid,*`, d, q));
  }));
});

Deno.test("proxy properties: an IPv4 address is in a CIDR exactly when its first `bits` bits agree", () => {
  fc.assert(fc.property(ipv4, ipv4, fc.integer({ min: 0, max: 32 }), (a, b, bits) => {
    const n = (s: string) => s.split(".").reduce((x, o) => x * 256 + Number(o), 0);
    const shift = 32 - bits;
    const same = bits === 0 || Math.floor(n(a) / 2 ** shift) === Math.floor(n(b) / 2 ** shift);
    assertEquals(noProxyMatches(`${a}/${bits}`, b, "443"), same, `${b} in ${a}/${bits}`);
  }));
});

Deno.test("proxy properties: loopback is direct whatever the environment says", () => {
  fc.assert(fc.property(
    fc.integer({ min: 0, max: 0xffffff }),
    fc.option(fc.constantFrom("*", "example.com", "10.0.0.0/8", ""), { nil: undefined }),
    port,
    (low, np, p) => {
      const host = `127.${low >> 16}.${(low >> 8) & 255}.${low & 255}`;
      assert(isLoopbackHost(host));
      const e = env({
        HTTPS_PROXY: "http://proxy:3128",
        ...(np !== undefined ? { NO_PROXY: np } : {}),
      });
      assertEquals(chooseProxy(`https://${host}:${p}`, undefined, e).url, undefined);
    },
  ));
});

Deno.test("proxy: IPv6 parsing", () => {
  assertEquals(parseIPv6("::1"), 1n);
  assertEquals(parseIPv6("::"), 0n);
  assertEquals(parseIPv6("1::"), 1n << 112n);
  assertEquals(parseIPv6("::ffff:127.0.0.1"), (0xffffn << 32n) | 0x7f000001n);
  assertEquals(parseIPv6("1:2:3:4:5:6:7:8:9"), undefined);
  assertEquals(parseIPv6("1::2::3"), undefined);
  assertEquals(parseIPv6("example.com"), undefined);
});
