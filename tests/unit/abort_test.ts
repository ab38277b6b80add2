/**
 * linkedStop (lib/runtime/abort.ts): a plain controller that follows its parent signal, stops on
 * its own, and lets go of the parent when unlinked.
 */
import { assert, assertEquals } from "../assert.ts";
import { linkedStop } from "../../lib/runtime/abort.ts";

Deno.test("linkedStop: aborts with the parent (its reason), or on its own without the parent", () => {
  const parent = new AbortController();
  const a = linkedStop(parent.signal);
  const b = linkedStop(parent.signal);
  b.controller.abort();
  assert(b.signal.aborted && !parent.signal.aborted, "own stop leaves the parent");
  parent.abort("bye");
  assert(a.signal.aborted);
  assertEquals(a.signal.reason, "bye");
});

Deno.test("linkedStop: an aborted parent gives an aborted stop; unlink detaches", () => {
  const done = new AbortController();
  done.abort("early");
  assertEquals(linkedStop(done.signal).signal.reason, "early");
  const parent = new AbortController();
  const c = linkedStop(parent.signal);
  c.unlink();
  parent.abort();
  assert(!c.signal.aborted, "unlinked: the parent's abort no longer reaches it");
});
