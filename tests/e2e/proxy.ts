/**
 * A loopback TCP proxy the tests control, to put faults between a client and the apiserver
 * without touching either: it listens on 127.0.0.1 (port chosen by the kernel) and forwards every
 * connection to a target on 127.0.0.1. TLS passes through untouched, so a client that trusts the
 * cluster CA verifies the apiserver's certificate (its SAN holds 127.0.0.1).
 *
 * Modes:
 * - `forward` (initial, and after {@link TcpProxy.resume}): new connections are forwarded.
 * - {@link TcpProxy.cut}: every live connection is closed; new connections are accepted and
 *   closed at once (the client sees a reset/EOF, as when a network path drops).
 * - {@link TcpProxy.pause}: every live connection stops moving bytes in both directions but stays
 *   open (a stalled stream: no FIN, no RST); new connections are accepted and stalled as well.
 *   {@link TcpProxy.resume} forwards NEW connections again; connections stalled before stay stuck
 *   until {@link TcpProxy.close}, which is what a half-dead middlebox does.
 * - {@link TcpProxy.retarget}: new connections go to another port on 127.0.0.1 (a load balancer
 *   moving to another apiserver).
 * - {@link TcpProxy.flap}: a flapping link: every `periodMs` every live connection is cut and new
 *   ones are refused for `downMs`, then forwarded again, until {@link TcpProxy.stopFlapping} (or
 *   close).
 *
 * Every address is 127.0.0.1; the proxy never dials anything else. {@link TcpProxy.close} ends
 * the listener, every connection and every pump, so test sanitizers see nothing left behind.
 *
 * @module
 */

/** What the proxy does with connections. */
export type ProxyMode = "forward" | "cut" | "paused";

interface Conn {
  id: number;
  client: Deno.TcpConn;
  upstream?: Deno.TcpConn;
  stalled: boolean;
  closed: boolean;
  /** Resolves when the connection is closed (wakes stalled pumps). */
  done: Promise<void>;
  finish: () => void;
}

const CHUNK_BYTES = 64 * 1024;
/** Bound on one connection's pump iterations (each moves up to 64 KiB); never reached in tests. */
const MAX_PUMP_ITERATIONS = 10_000_000;

/** A TCP proxy on 127.0.0.1 forwarding to `127.0.0.1:targetPort`. */
export class TcpProxy {
  /** The port the proxy listens on (127.0.0.1). */
  readonly port: number;
  #targetPort: number;
  readonly #listener: Deno.TcpListener;
  #mode: ProxyMode = "forward";
  #conns = new Map<number, Conn>();
  #seq = 0;
  #tasks = new Set<Promise<void>>();
  #acceptLoop: Promise<void>;
  #closed = false;
  #flapTimer?: ReturnType<typeof setInterval>;
  #flapResume?: ReturnType<typeof setTimeout>;
  /** Connections accepted so far, whatever happened to them. */
  accepted = 0;
  /** Cuts made by {@link flap} so far. */
  flaps = 0;

  private constructor(targetPort: number) {
    this.#targetPort = targetPort;
    this.#listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    this.port = (this.#listener.addr as Deno.NetAddr).port;
    this.#acceptLoop = this.#accept();
  }

  /** Starts a proxy to `127.0.0.1:targetPort`, or to the port of an `https://127.0.0.1:P` URL. */
  static start(target: number | string): TcpProxy {
    let port: number;
    if (typeof target === "number") port = target;
    else {
      const url = new URL(target);
      if (url.hostname !== "127.0.0.1" && url.hostname !== "[::1]") {
        throw new Error(`TcpProxy: target ${target} is not a loopback address`);
      }
      port = Number(url.port);
    }
    if (!Number.isInteger(port) || port <= 0) throw new Error(`TcpProxy: bad target ${target}`);
    return new TcpProxy(port);
  }

  /** `https://127.0.0.1:<port>`: the server URL to give a client. */
  get url(): string {
    return `https://127.0.0.1:${this.port}`;
  }

  /** Current mode. */
  get mode(): ProxyMode {
    return this.#mode;
  }

  /** Connections open now (forwarding or stalled). */
  get liveConnections(): number {
    return this.#conns.size;
  }

  /** Connections open now that are stalled. */
  get stalledConnections(): number {
    let n = 0;
    for (const c of this.#conns.values()) if (c.stalled) n++;
    return n;
  }

  /**
   * Forwards new connections to `127.0.0.1:targetPort` from now on (live ones stay where they
   * are): a load balancer moving to another apiserver.
   */
  retarget(targetPort: number): void {
    if (!Number.isInteger(targetPort) || targetPort <= 0) {
      throw new Error(`TcpProxy: bad target ${targetPort}`);
    }
    this.#targetPort = targetPort;
  }

  /** Closes every live connection; refuses (accepts and closes) new ones until resume(). */
  cut(): void {
    this.#mode = "cut";
    for (const c of [...this.#conns.values()]) this.#closeConn(c);
  }

  /** Stalls every live connection (no byte moves, nothing closes); new ones stall too. */
  pause(): void {
    this.#mode = "paused";
    for (const c of this.#conns.values()) c.stalled = true;
  }

  /** Forwards new connections again; connections stalled before stay stuck. */
  resume(): void {
    this.#mode = "forward";
  }

  /**
   * A flapping link: every `periodMs` (ms) cut every connection and refuse new ones for `downMs`
   * (ms), then forward again. Runs until {@link stopFlapping} or {@link close}.
   */
  flap(periodMs: number, downMs: number): void {
    if (!(downMs > 0 && periodMs > downMs)) throw new Error("flap: need 0 < downMs < periodMs");
    this.stopFlapping();
    this.#flapTimer = setInterval(() => {
      this.flaps++;
      this.cut();
      clearTimeout(this.#flapResume);
      this.#flapResume = setTimeout(() => this.resume(), downMs);
    }, periodMs);
  }

  /** Ends {@link flap}: connections are forwarded again and no more cuts follow. */
  stopFlapping(): void {
    clearInterval(this.#flapTimer);
    clearTimeout(this.#flapResume);
    this.#flapTimer = undefined;
    this.#flapResume = undefined;
    if (this.#mode === "cut") this.resume();
  }

  /** Closes the listener and every connection, and waits for every pump to end. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.stopFlapping();
    this.#closed = true;
    try {
      this.#listener.close();
    } catch { /* already closed */ }
    for (const c of [...this.#conns.values()]) this.#closeConn(c);
    await this.#acceptLoop;
    // Pumps end once their sockets are closed; bounded by the number of tasks.
    for (let i = 0; i < 1_000 && this.#tasks.size > 0; i++) {
      await Promise.allSettled([...this.#tasks]);
    }
  }

  async #accept(): Promise<void> {
    for (let i = 0; i < 1_000_000 && !this.#closed; i++) {
      let client: Deno.TcpConn;
      try {
        client = await this.#listener.accept();
      } catch {
        return; // listener closed
      }
      this.accepted++;
      if (this.#mode === "cut" || this.#closed) {
        try {
          client.close();
        } catch { /* gone */ }
        continue;
      }
      let finish!: () => void;
      const done = new Promise<void>((r) => finish = r);
      const conn: Conn = {
        id: ++this.#seq,
        client,
        stalled: this.#mode === "paused",
        closed: false,
        done,
        finish,
      };
      this.#conns.set(conn.id, conn);
      this.#track(this.#serve(conn));
    }
  }

  #track(p: Promise<void>): void {
    const t = p.catch(() => {}).finally(() => this.#tasks.delete(t));
    this.#tasks.add(t);
  }

  async #serve(conn: Conn): Promise<void> {
    try {
      conn.upstream = await Deno.connect({ hostname: "127.0.0.1", port: this.#targetPort });
    } catch {
      this.#closeConn(conn);
      return;
    }
    if (conn.closed) {
      this.#closeConn(conn);
      return;
    }
    const pumps = [
      this.#pump(conn, conn.client, conn.upstream),
      this.#pump(conn, conn.upstream, conn.client),
    ];
    // Either side ending ends the connection; closing the sockets wakes the other pump.
    await Promise.race(pumps);
    this.#closeConn(conn);
    await Promise.allSettled(pumps);
  }

  /** Copies `from` → `to` while the connection forwards; parks while it is stalled. */
  async #pump(conn: Conn, from: Deno.TcpConn, to: Deno.TcpConn): Promise<void> {
    const buf = new Uint8Array(CHUNK_BYTES);
    for (let i = 0; i < MAX_PUMP_ITERATIONS; i++) {
      // A stalled connection reads nothing more (so the sender's window fills) and writes nothing.
      if (conn.stalled) await conn.done;
      if (conn.closed) return;
      let n: number | null;
      try {
        n = await from.read(buf);
      } catch {
        return;
      }
      if (n === null) return; // EOF: end the whole connection (no half-close needed here)
      if (conn.stalled) await conn.done; // bytes that arrived as the stall began are held back
      if (conn.closed) return;
      try {
        let off = 0;
        while (off < n) off += await to.write(buf.subarray(off, n));
      } catch {
        return;
      }
    }
  }

  #closeConn(conn: Conn): void {
    if (!conn.closed) {
      conn.closed = true;
      conn.finish();
    }
    this.#conns.delete(conn.id);
    for (const s of [conn.client, conn.upstream]) {
      try {
        s?.close();
      } catch { /* already closed */ }
    }
  }
}
