/**
 * The test proxy's held path (tests/e2e/proxy.ts, `hold` and `deliver`; S23): bytes a client sends
 * while the path holds reach the server only after delivery, each the hold's length after it was
 * sent and with its spacing, and the client's close comes after them, at least the linger after
 * the last byte. Against a loopback server that records when each byte and the close arrive.
 */
import { assert, assertEquals } from "../assert.ts";
import { TcpProxy } from "../e2e/proxy.ts";

Deno.test("proxy: held bytes are delivered with their spacing, the close held back behind them", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const arrivals: { at: number; text: string }[] = [];
  let closedAt = NaN;
  const server = (async () => {
    const conn = await listener.accept();
    const buf = new Uint8Array(1024);
    for (let i = 0; i < 100; i++) {
      const n = await conn.read(buf).catch(() => null);
      if (n === null) break;
      arrivals.push({ at: performance.now(), text: new TextDecoder().decode(buf.subarray(0, n)) });
    }
    closedAt = performance.now();
    conn.close();
  })();
  const proxy = TcpProxy.start((listener.addr as Deno.NetAddr).port);
  try {
    const client = await Deno.connect({ hostname: "127.0.0.1", port: proxy.port });
    await client.write(new TextEncoder().encode("before;"));
    await new Promise((r) => setTimeout(r, 100));
    proxy.hold();
    const sentAt = performance.now();
    await client.write(new TextEncoder().encode("one;"));
    await new Promise((r) => setTimeout(r, 300));
    await client.write(new TextEncoder().encode("two;"));
    client.close();
    await new Promise((r) => setTimeout(r, 400));
    assertEquals(arrivals.map((a) => a.text).join(""), "before;", "held bytes passed");
    assertEquals(proxy.heldBytes, 8);
    const { delayMs, connections } = proxy.deliver(500);
    assertEquals(connections, 1);
    await server;
    assertEquals(arrivals.map((a) => a.text), ["before;", "one;", "two;"]);
    // Each byte the hold's length after it was sent; the spacing kept (timers: ±50 ms).
    assert(arrivals[1].at - sentAt >= delayMs - 5, `one arrived ${arrivals[1].at - sentAt} ms`);
    const spacing = arrivals[2].at - arrivals[1].at;
    assert(spacing > 250 && spacing < 400, `spacing ${spacing} ms`);
    // The close at least the linger after the last byte.
    assert(closedAt - arrivals[2].at >= 450, `closed ${closedAt - arrivals[2].at} ms after`);
  } finally {
    await proxy.close();
    listener.close();
  }
});
