/**
 * Which HTTP proxy, if any, carries the requests to an apiserver: the kubeconfig cluster's
 * `proxy-url`, else the environment's proxies applied as Go's `http.ProxyFromEnvironment` (what
 * client-go and kubectl use) applies them.
 *
 * Rules (Go `golang.org/x/net/http/httpproxy`, client-go `rest.Config.Proxy`):
 * - A kubeconfig `proxy-url` (http, https, socks5) carries every request to that cluster;
 *   `NO_PROXY` does not apply to it.
 * - Otherwise `HTTPS_PROXY` (or `https_proxy`) for an `https://` server, `HTTP_PROXY` (or
 *   `http_proxy`) for an `http://` one; the upper-case name first, an empty value is unset. A
 *   value without a scheme means `http://`.
 * - Never proxied: `localhost` and loopback addresses (127.0.0.0/8, ::1), whatever the
 *   environment says (Go's rule; a proxy cannot reach the caller's loopback).
 * - `NO_PROXY` (or `no_proxy`): comma-separated entries, case-insensitive; `*` alone disables
 *   proxies; an IP address matches that address; a CIDR (`10.0.0.0/8`, `fd00::/8`) matches the IP
 *   addresses in it; a name matches itself and its subdomains (`example.com`, `*.example.com`),
 *   one with a leading dot only its subdomains (`.example.com`); any entry may end in `:port`
 *   (then only that port matches; IPv6 addresses in brackets: `[::1]:443`).
 *
 * Deno's `fetch` applies the environment's proxies by itself (its own NO_PROXY matching, no
 * loopback exception, and NO_PROXY even over an explicit proxy). {@link takeProxyEnvironment}
 * therefore reads the six variables once and removes them from this process's environment, so
 * that an HTTP client applies only the proxy given to it (`Deno.createHttpClient`'s `proxy`).
 * Exec credential plugins get the variables back in their own environment (credentials.ts).
 *
 * @module
 */

/** The proxy variables of the environment, as read at start-up ({@link takeProxyEnvironment}). */
export interface ProxyEnvironment {
  /** `HTTPS_PROXY`, else `https_proxy` (empty values are unset). */
  httpsProxy?: string;
  /** `HTTP_PROXY`, else `http_proxy`. */
  httpProxy?: string;
  /** `NO_PROXY`, else `no_proxy`. */
  noProxy?: string;
  /** Every variable that was set, by its own name (for exec plugins' environment). */
  raw: Record<string, string>;
  /** Why the environment could not be read (no `--allow-env` for these names), if so. */
  unreadable?: string;
}

/** The names read by {@link readProxyEnvironment}, upper-case first (Go's order). */
export const PROXY_ENV_NAMES = [
  "HTTPS_PROXY",
  "https_proxy",
  "HTTP_PROXY",
  "http_proxy",
  "NO_PROXY",
  "no_proxy",
] as const;

/**
 * Reads the proxy variables through `get` (Go's `FromEnvironment`: the upper-case name first, an
 * empty value counts as unset).
 * @param get reads one variable (throws when not permitted)
 */
export function readProxyEnvironment(get: (name: string) => string | undefined): ProxyEnvironment {
  const raw: Record<string, string> = {};
  try {
    for (const n of PROXY_ENV_NAMES) {
      const v = get(n);
      if (v !== undefined && v !== "") raw[n] = v;
    }
  } catch (err) {
    return { raw: {}, unreadable: (err as Error).message ?? String(err) };
  }
  return {
    httpsProxy: raw.HTTPS_PROXY ?? raw.https_proxy,
    httpProxy: raw.HTTP_PROXY ?? raw.http_proxy,
    noProxy: raw.NO_PROXY ?? raw.no_proxy,
    raw,
  };
}

let taken: ProxyEnvironment | undefined;

/**
 * The process's proxy environment, read once; the first call also removes the variables from
 * the process environment so that Deno's HTTP clients apply none of them implicitly (see the
 * module doc). Later calls return the same value. Without permission to read or change them
 * (`--allow-env` not listing them), the result has `unreadable` set and nothing is removed.
 */
export function takeProxyEnvironment(): ProxyEnvironment {
  if (taken) return taken;
  const env = readProxyEnvironment((n) => Deno.env.get(n));
  if (!env.unreadable) {
    try {
      for (const n of Object.keys(env.raw)) Deno.env.delete(n);
    } catch (err) {
      env.unreadable = `cannot remove the proxy variables from the environment: ${
        (err as Error).message
      }`;
    }
  }
  taken = env;
  return env;
}

/** The proxy chosen for one apiserver: `url` undefined means a direct connection. */
export interface ProxyChoice {
  /** Proxy URL without credentials (scheme://host:port), or undefined: direct. */
  url?: string;
  /** Basic auth for the proxy from the URL's userinfo, if any. */
  basicAuth?: { username: string; password: string };
  /** Where the choice comes from, for logs: `kubeconfig proxy-url`, `HTTPS_PROXY`, ... */
  source: string;
  /** Why direct, when direct: `loopback`, `NO_PROXY`, `no proxy set`. */
  reason?: string;
}

/**
 * Parses a proxy URL as Go does: no scheme means `http://`; http, https, socks5 and socks5h
 * are accepted. Userinfo is split off into `basicAuth`.
 * @throws Error naming `what` for a value that is not a URL or has another scheme
 */
export function parseProxyUrl(
  value: string,
  what: string,
): { url: string; basicAuth?: { username: string; password: string } } {
  let u: URL;
  try {
    u = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(value) ? value : `http://${value}`);
  } catch {
    throw new Error(`${what} "${value}" is not a URL`);
  }
  if (!["http:", "https:", "socks5:", "socks5h:"].includes(u.protocol)) {
    throw new Error(
      `${what} "${value}": scheme ${u.protocol} is not supported (http, https, socks5)`,
    );
  }
  const basicAuth = u.username
    ? { username: decodeURIComponent(u.username), password: decodeURIComponent(u.password) }
    : undefined;
  u.username = "";
  u.password = "";
  const url = `${u.protocol}//${u.host}`;
  return basicAuth ? { url, basicAuth } : { url };
}

/** Whether `host` (a URL hostname: IPv6 in brackets) is localhost or a loopback address. */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase().replace(/^\[|\]$/g, "");
  if (h === "localhost") return true;
  const v4 = parseIPv4(h);
  if (v4 !== undefined) return (v4 >>> 24) === 127;
  const v6 = parseIPv6(h);
  if (v6 === undefined) return false;
  if (v6 === 1n) return true; // ::1
  // IPv4-mapped ::ffff:127.x.y.z
  return (v6 >> 32n) === 0xffffn && Number((v6 >> 24n) & 0xffn) === 127;
}

/** Parses dotted-quad IPv4 into an unsigned 32-bit number; undefined when it is not one. */
export function parseIPv4(s: string): number | undefined {
  const parts = s.split(".");
  if (parts.length !== 4) return undefined;
  let n = 0;
  for (const p of parts) {
    if (!/^\d{1,3}$/.test(p) || Number(p) > 255) return undefined;
    n = n * 256 + Number(p);
  }
  return n >>> 0;
}

/** Parses an IPv6 address (no brackets, no zone) into a 128-bit bigint; undefined otherwise. */
export function parseIPv6(s: string): bigint | undefined {
  if (!s.includes(":") || !/^[0-9a-f:.]+$/i.test(s)) return undefined;
  let groups: number[] = [];
  const dbl = s.indexOf("::");
  if (dbl !== s.lastIndexOf("::")) return undefined;
  const parse = (part: string): number[] | undefined => {
    if (part === "") return [];
    const out: number[] = [];
    const items = part.split(":");
    for (let i = 0; i < items.length; i++) {
      const it = items[i];
      if (i === items.length - 1 && it.includes(".")) {
        const v4 = parseIPv4(it);
        if (v4 === undefined) return undefined;
        out.push(v4 >>> 16, v4 & 0xffff);
      } else {
        if (!/^[0-9a-f]{1,4}$/i.test(it)) return undefined;
        out.push(parseInt(it, 16));
      }
    }
    return out;
  };
  if (dbl >= 0) {
    const head = parse(s.slice(0, dbl));
    const tail = parse(s.slice(dbl + 2));
    if (!head || !tail || head.length + tail.length > 7) return undefined;
    groups = [...head, ...Array(8 - head.length - tail.length).fill(0), ...tail];
  } else {
    const all = parse(s);
    if (!all || all.length !== 8) return undefined;
    groups = all;
  }
  let n = 0n;
  for (const g of groups) n = (n << 16n) | BigInt(g);
  return n;
}

type Ip = { v: 4; n: bigint } | { v: 6; n: bigint };

function parseIp(s: string): Ip | undefined {
  const v4 = parseIPv4(s);
  if (v4 !== undefined) return { v: 4, n: BigInt(v4) };
  const v6 = parseIPv6(s);
  return v6 === undefined ? undefined : { v: 6, n: v6 };
}

/**
 * Whether `NO_PROXY` exempts `host:port` from the environment's proxy (Go's rules, see the module
 * doc). `host` is a URL hostname (IPv6 in brackets or bare), `port` the effective port.
 */
export function noProxyMatches(noProxy: string | undefined, host: string, port: string): boolean {
  if (!noProxy) return false;
  const h = host.toLowerCase().replace(/^\[|\]$/g, "").replace(/\.$/, "");
  const ip = parseIp(h);
  for (let entry of noProxy.split(",")) {
    entry = entry.trim().toLowerCase();
    if (entry === "") continue;
    if (entry === "*") return true;
    // CIDR
    const slash = entry.indexOf("/");
    if (slash >= 0) {
      const net = parseIp(entry.slice(0, slash));
      const bits = Number(entry.slice(slash + 1));
      if (!net || !ip || net.v !== ip.v || !/^\d+$/.test(entry.slice(slash + 1))) continue;
      const width = net.v === 4 ? 32 : 128;
      if (bits > width) continue;
      const shift = BigInt(width - bits);
      if ((net.n >> shift) === (ip.n >> shift)) return true;
      continue;
    }
    // host[:port], [v6]:port, bare v6
    let ehost = entry;
    let eport = "";
    const bracket = /^\[([^\]]+)\](?::(\d+))?$/.exec(entry);
    if (bracket) {
      ehost = bracket[1];
      eport = bracket[2] ?? "";
    } else if (parseIPv6(entry) === undefined) {
      const m = /^(.*):(\d+)$/.exec(entry);
      if (m) {
        ehost = m[1];
        eport = m[2];
      }
    }
    if (eport && eport !== port) continue;
    const eip = parseIp(ehost);
    if (eip) {
      if (ip && eip.v === ip.v && eip.n === ip.n) return true;
      continue;
    }
    if (ip) continue; // a name never matches an IP host
    if (ehost.startsWith("*.")) ehost = ehost.slice(1);
    ehost = ehost.replace(/\.$/, "");
    if (ehost.startsWith(".")) {
      if (h.endsWith(ehost)) return true;
    } else if (h === ehost || h.endsWith(`.${ehost}`)) return true;
  }
  return false;
}

/**
 * Chooses the proxy for requests to `server` (see the module doc for the rules).
 * @param server the apiserver's base URL
 * @param proxyUrl the kubeconfig cluster's `proxy-url`, if any
 * @param env the environment's proxy variables
 * @throws Error when the chosen proxy's URL is not usable (names where it comes from)
 */
export function chooseProxy(
  server: string,
  proxyUrl: string | undefined,
  env: ProxyEnvironment,
): ProxyChoice {
  if (proxyUrl) {
    return { ...parseProxyUrl(proxyUrl, "kubeconfig proxy-url"), source: "kubeconfig proxy-url" };
  }
  const u = new URL(server);
  const https = u.protocol === "https:";
  const value = https ? env.httpsProxy : env.httpProxy;
  const name = https
    ? (env.raw.HTTPS_PROXY ? "HTTPS_PROXY" : "https_proxy")
    : (env.raw.HTTP_PROXY ? "HTTP_PROXY" : "http_proxy");
  if (!value) return { source: "environment", reason: "no proxy set" };
  if (isLoopbackHost(u.hostname)) return { source: name, reason: "loopback is never proxied" };
  const port = u.port || (https ? "443" : "80");
  if (noProxyMatches(env.noProxy, u.hostname, port)) {
    return { source: name, reason: `${env.raw.NO_PROXY ? "NO_PROXY" : "no_proxy"} matches` };
  }
  return { ...parseProxyUrl(value, name), source: name };
}

/** One line for logs: `direct (loopback is never proxied)` or `http://proxy:3128 (HTTPS_PROXY)`. */
export function describeProxy(p: ProxyChoice): string {
  return p.url ? `${p.url} (${p.source})` : `direct (${p.reason ?? "no proxy"})`;
}

/** The `proxy` option of `Deno.createHttpClient` for a choice; undefined for a direct connection. */
export function denoProxy(p: ProxyChoice): Deno.Proxy | undefined {
  if (!p.url) return undefined;
  const transport = p.url.startsWith("socks5") ? "socks5" : undefined;
  return {
    ...(transport ? { transport } : {}),
    url: p.url,
    ...(p.basicAuth ? { basicAuth: p.basicAuth } : {}),
  } as Deno.Proxy;
}
