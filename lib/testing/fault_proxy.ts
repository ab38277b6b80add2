/**
 * A loopback TCP proxy a test controls, to put faults between a client and the apiserver
 * without touching either ({@linkcode startFaultProxy}, part of the `./testing` entry module): it
 * listens on 127.0.0.1 (port chosen by the kernel) and forwards every connection to a target on
 * 127.0.0.1. TLS passes through untouched, so a client that trusts the
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
 * - {@link TcpProxy.latency}: every chunk of bytes waits a fixed delay before it is passed on, in
 *   both directions (a slow path), until `latency(0)`.
 * - {@link TcpProxy.retarget}: new connections go to another port on 127.0.0.1 (a load balancer
 *   moving to another apiserver).
 * - {@link TcpProxy.flap}: a flapping link: every `periodMs` every live connection is cut and new
 *   ones are refused for `downMs`, then forwarded again, until {@link TcpProxy.stopFlapping} (or
 *   close).
 * - {@link TcpProxy.hold}: the path holds the client's bytes (client → server only; answers still
 *   flow): every byte the client sends on a live or new connection is read (so the client
 *   believes it sent) and kept, with the time it was sent, and nothing is passed on, the client's
 *   close included. {@link TcpProxy.deliver} then turns each held connection into a delay line of
 *   the hold's length D: every byte, and the close, reaches the server D after the client sent
 *   it, in order and with its original spacing, and the close at least `lingerMs` after the last
 *   byte — so a request aborted by the client reaches the server long enough before its abort
 *   (an HTTP/2 RST_STREAM, or the connection's close) to be handled as it would have been.
 *
 * Every address is 127.0.0.1; the proxy never dials anything else. {@link TcpProxy.close} ends
 * the listener, every connection and every pump, so test sanitizers see nothing left behind.
 *
 * @module
 */

/** What the proxy does with connections. */
export type ProxyMode = "forward" | "cut" | "paused" | "held";

/** A connection whose client → server bytes are held, then delayed (see {@link TcpProxy.hold}). */
interface Held {
  /** Bytes sent by the client (`data`), or its close (no `data`), with when (performance.now()). */
  items: { at: number; data?: Uint8Array }[];
  /** The delay of every item (ms), set by {@link TcpProxy.deliver}; undefined while held. */
  delayMs?: number;
  /** Wakes the writer (a new item, or the delivery). */
  wake: () => void;
  /** Delivers the items; ends after the client's close was passed on (or the connection ended). */
  writer?: Promise<void>;
}

interface Conn {
  id: number;
  client: Deno.TcpConn;
  upstream?: Deno.TcpConn;
  stalled: boolean;
  closed: boolean;
  /** Set while (and after) the connection's client bytes are held: see {@link TcpProxy.hold}. */
  held?: Held;
  /** Resolves when the connection is closed (wakes stalled pumps). */
  done: Promise<void>;
  finish: () => void;
}

const CHUNK_BYTES = 64 * 1024;
/** Bound on one connection's pump iterations (each moves up to 64 KiB); never reached in tests. */
const MAX_PUMP_ITERATIONS = 10_000_000;

/** A TCP proxy on 127.0.0.1 forwarding to `127.0.0.1:targetPort`. */
export class TcpProxy implements AsyncDisposable {
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
  /** When the current hold began (performance.now()); undefined when not holding. */
  #holdStartedAt?: number;
  #lingerMs = 3_000;
  #latencyMs = 0;
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

  /**
   * Starts a proxy to `127.0.0.1:targetPort`, or to the port of an `https://127.0.0.1:P` (or
   * `https://[::1]:P`, dialled as 127.0.0.1) URL.
   * @throws Error when the target is not a loopback URL or has no valid port
   */
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

  /**
   * From now on every chunk read from either side (up to 64 KiB, as it arrived) waits `ms`
   * milliseconds before it is written to the other side, on live and new connections; a request
   * and its answer take at least 2 × `ms` longer. Reading pauses meanwhile, so throughput drops
   * too. `latency(0)` ends it. A chunk already waiting keeps its delay.
   * @throws RangeError when `ms` is not a finite number ≥ 0
   */
  latency(ms: number): void {
    if (!(Number.isFinite(ms) && ms >= 0)) throw new RangeError(`latency: bad delay ${ms} ms`);
    this.#latencyMs = ms;
  }

  /** The delay of {@link latency} in ms (0: none). */
  get latencyMs(): number {
    return this.#latencyMs;
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
   * Holds every byte clients send from now on, on live and new connections, their closes
   * included; answers from the server still flow. Ended by {@link deliver}.
   */
  hold(): void {
    if (this.#mode === "held") return;
    this.#mode = "held";
    this.#holdStartedAt = performance.now();
    for (const c of this.#conns.values()) this.#startHolding(c);
  }

  /** Bytes held so far in the current or last hold, over all connections (closes not counted). */
  get heldBytes(): number {
    let n = 0;
    for (const c of this.#conns.values()) {
      for (const i of c.held?.items ?? []) n += i.data?.length ?? 0;
    }
    return n;
  }

  /**
   * Ends {@link hold}: every held connection becomes a delay line of the hold's length D (now
   * minus the hold's start): its held bytes reach the server D after they were sent, with their
   * spacing, and so does everything it sends later; the client's close is passed on D after it
   * came and at least `lingerMs` (ms) after the last byte. New connections are forwarded at once.
   * @returns D (ms) and how many connections were held
   */
  deliver(lingerMs = 3_000): { delayMs: number; connections: number } {
    if (this.#mode !== "held" || this.#holdStartedAt === undefined) {
      throw new Error("deliver: not holding");
    }
    const delayMs = performance.now() - this.#holdStartedAt;
    this.#lingerMs = lingerMs;
    let connections = 0;
    for (const c of this.#conns.values()) {
      if (c.held && c.held.delayMs === undefined) {
        c.held.delayMs = delayMs;
        c.held.wake();
        connections++;
      }
    }
    this.#mode = "forward";
    this.#holdStartedAt = undefined;
    return { delayMs, connections };
  }

  #startHolding(conn: Conn): void {
    if (conn.held) return;
    const held: Held = { items: [], wake: () => {} };
    conn.held = held;
    held.writer = this.#delayLine(conn, held);
    this.#track(held.writer);
  }

  /** Passes a held connection's items on once delivered, each `delayMs` after it was sent. */
  async #delayLine(conn: Conn, held: Held): Promise<void> {
    let lastWriteAt = -Infinity;
    for (let i = 0; i < MAX_PUMP_ITERATIONS && !conn.closed; i++) {
      if (held.delayMs === undefined || held.items.length === 0) {
        await Promise.race([new Promise<void>((r) => held.wake = r), conn.done]);
        continue;
      }
      const item = held.items[0];
      const dueAt = item.data
        ? item.at + held.delayMs
        : Math.max(item.at + held.delayMs, lastWriteAt + this.#lingerMs);
      const waitMs = dueAt - performance.now();
      if (waitMs > 0) {
        let timer: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([new Promise<void>((r) => timer = setTimeout(r, waitMs)), conn.done]);
        clearTimeout(timer);
        continue;
      }
      held.items.shift();
      if (!item.data) return; // the client's close: the connection ends now
      try {
        let off = 0;
        while (off < item.data.length) off += await conn.upstream!.write(item.data.subarray(off));
      } catch {
        return;
      }
      lastWriteAt = performance.now();
    }
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

  /** {@link close}, for `await using proxy = startFaultProxy(...)`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
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
      if (this.#mode === "held") this.#startHolding(conn);
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
    // Either side ending ends the connection; closing the sockets wakes the other pump. When the
    // client's side ended a held connection, it ends once its delay line has passed the client's
    // close on (or the proxy closed).
    const ended = await Promise.race(pumps);
    if (conn.held && ended === "client") await conn.held.writer;
    this.#closeConn(conn);
    await Promise.allSettled(pumps);
  }

  /**
   * Copies `from` → `to` while the connection forwards; parks while it is stalled. Resolves with
   * the side that ended it (closed, failed, or could not be written to).
   */
  async #pump(conn: Conn, from: Deno.TcpConn, to: Deno.TcpConn): Promise<"client" | "server"> {
    const fromSide = from === conn.client ? "client" : "server";
    const toSide = fromSide === "client" ? "server" : "client";
    const buf = new Uint8Array(CHUNK_BYTES);
    for (let i = 0; i < MAX_PUMP_ITERATIONS; i++) {
      // A stalled connection reads nothing more (so the sender's window fills) and writes nothing.
      if (conn.stalled) await conn.done;
      if (conn.closed) return fromSide;
      let n: number | null;
      try {
        n = await from.read(buf);
      } catch {
        n = null; // reset or closed: as an end of stream
      }
      const held = from === conn.client ? conn.held : undefined;
      if (held) {
        // Kept (a copy: the buffer is reused) with the time it was sent, for the delay line.
        held.items.push({ at: performance.now(), data: n === null ? undefined : buf.slice(0, n) });
        held.wake();
        if (n === null) return fromSide;
        continue;
      }
      if (n === null) return fromSide; // EOF: end the whole connection (no half-close needed)
      if (this.#latencyMs > 0) {
        let timer: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([
          new Promise<void>((r) => timer = setTimeout(r, this.#latencyMs)),
          conn.done,
        ]);
        clearTimeout(timer);
      }
      if (conn.stalled) await conn.done; // bytes that arrived as the stall began are held back
      if (conn.closed) return fromSide;
      try {
        let off = 0;
        while (off < n) off += await to.write(buf.subarray(off, n));
      } catch {
        return toSide;
      }
    }
    return fromSide;
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

/**
 * Starts a {@link TcpProxy} on 127.0.0.1 (a port the kernel picks) forwarding to `target`: a port
 * on 127.0.0.1, or a loopback URL such as a control plane's `server`. Give clients
 * `proxy.url` as their server: TLS passes through, and the apiserver's certificate names
 * 127.0.0.1, so they verify it as before. End it with `close()` (or `await using`).
 *
 * ```ts
 * await using proxy = startFaultProxy(plane.server);
 * proxy.pause(); // live connections stall, nothing closes
 * proxy.cut(); // every connection closes, new ones are refused
 * proxy.resume();
 * ```
 * @throws Error when `target` is not on 127.0.0.1 or ::1
 */
export function startFaultProxy(target: number | string): TcpProxy {
  return TcpProxy.start(target);
}
