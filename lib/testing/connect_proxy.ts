/**
 * A tiny HTTP CONNECT proxy on 127.0.0.1 for tests of a client's proxy support
 * ({@linkcode startConnectProxy}, part of the `./testing` entry module): it answers
 * `CONNECT host:port` with 200 and then relays bytes both ways (TLS passes through untouched),
 * and counts the tunnels by target. It dials only loopback targets (127.0.0.1, ::1, localhost);
 * anything else, and any other method, is answered 403. {@link ConnectProxy.close} ends the
 * listener and every tunnel.
 *
 * @module
 */

/** Longest request head read before giving up (bytes). */
const MAX_HEAD_BYTES = 16 * 1024;

/** A CONNECT proxy on 127.0.0.1 (see the module doc). */
export class ConnectProxy implements AsyncDisposable {
  /** The port it listens on. */
  readonly port: number;
  /** Tunnels opened, by `host:port` target. */
  readonly tunnels: Map<string, number> = new Map();
  #listener: Deno.TcpListener;
  #conns = new Set<Deno.Conn>();
  #tasks = new Set<Promise<void>>();
  #accept: Promise<void>;

  /** Listens on 127.0.0.1, a port the kernel picks (see {@link port}). */
  constructor() {
    this.#listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    this.port = (this.#listener.addr as Deno.NetAddr).port;
    this.#accept = this.#loop();
  }

  /** `http://127.0.0.1:<port>`. */
  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Tunnels opened in all. */
  get total(): number {
    let n = 0;
    for (const v of this.tunnels.values()) n += v;
    return n;
  }

  async #loop(): Promise<void> {
    for (let i = 0; i < 1_000_000; i++) {
      let conn: Deno.Conn;
      try {
        conn = await this.#listener.accept();
      } catch {
        return;
      }
      this.#conns.add(conn);
      const task = this.#serve(conn).catch(() => {}).finally(() => {
        this.#conns.delete(conn);
        try {
          conn.close();
        } catch { /* closed */ }
        this.#tasks.delete(task);
      });
      this.#tasks.add(task);
    }
  }

  async #serve(conn: Deno.Conn): Promise<void> {
    const buf = new Uint8Array(MAX_HEAD_BYTES);
    let len = 0;
    let headEnd = -1;
    while (headEnd < 0 && len < buf.length) {
      const n = await conn.read(buf.subarray(len));
      if (n === null) return;
      len += n;
      headEnd = new TextDecoder().decode(buf.subarray(0, len)).indexOf("\r\n\r\n");
    }
    if (headEnd < 0) return;
    const head = new TextDecoder().decode(buf.subarray(0, headEnd));
    const m = /^CONNECT (\S+):(\d+) HTTP\/1\.[01]/.exec(head);
    const host = m?.[1].replace(/^\[|\]$/g, "");
    if (!m || !["127.0.0.1", "::1", "localhost"].includes(host!)) {
      await conn.write(new TextEncoder().encode("HTTP/1.1 403 Forbidden\r\n\r\n"));
      return;
    }
    const target = `${m[1]}:${m[2]}`;
    this.tunnels.set(target, (this.tunnels.get(target) ?? 0) + 1);
    const up = await Deno.connect({
      hostname: host === "localhost" ? "127.0.0.1" : host!,
      port: Number(m[2]),
    });
    this.#conns.add(up);
    try {
      await conn.write(new TextEncoder().encode("HTTP/1.1 200 Connection established\r\n\r\n"));
      // Bytes after the head (a client that did not wait for the 200) go first.
      const rest = buf.subarray(headEnd + 4, len);
      if (rest.length) await up.write(rest);
      await Promise.race([
        conn.readable.pipeTo(up.writable).catch(() => {}),
        up.readable.pipeTo(conn.writable).catch(() => {}),
      ]);
    } finally {
      this.#conns.delete(up);
      try {
        up.close();
      } catch { /* closed */ }
    }
  }

  /** Stops listening and ends every tunnel. */
  async close(): Promise<void> {
    try {
      this.#listener.close();
    } catch { /* closed */ }
    for (const c of this.#conns) {
      try {
        c.close();
      } catch { /* closed */ }
    }
    await this.#accept;
    await Promise.allSettled([...this.#tasks]);
  }

  /** {@link close}, for `await using proxy = startConnectProxy()`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

/**
 * Starts a {@link ConnectProxy} on 127.0.0.1 (a port the kernel picks). Give a client
 * `HTTPS_PROXY=<proxy.url>` (or its proxy option) and read `proxy.tunnels` to see that it went
 * through the proxy; targets other than loopback are refused with 403.
 */
export function startConnectProxy(): ConnectProxy {
  return new ConnectProxy();
}
