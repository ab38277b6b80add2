/**
 * A reflector run in the background for end-to-end tests, recording what it reported and every
 * call of its store's handlers.
 *
 * @module
 */
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import {
  Reflector,
  type ReflectorEvent,
  type ReflectorOptions,
} from "../../lib/runtime/reflector.ts";
import { objectKey, Store } from "../../lib/runtime/store.ts";

/** One store handler call, as recorded. */
export interface StoreCall {
  type: "add" | "update" | "delete";
  key: string;
  rv: string;
}

/** A reflector running in the background, with everything it reported. */
export interface Running<T extends KubeObject> {
  reflector: Reflector<T>;
  store: Store<T>;
  client: KubeClient;
  events: ReflectorEvent[];
  calls: StoreCall[];
  /** Events of one type. */
  of<K extends ReflectorEvent["type"]>(type: K): Extract<ReflectorEvent, { type: K }>[];
  /** Aborts the reflector, waits for run() to return, closes the client (unless shared). */
  stop(): Promise<void>;
}

/**
 * Starts a reflector on `client` with options `o` and a fresh frozen {@link Store}, recording
 * its events and store handler calls. With `shared: true` its `stop()` leaves the client open
 * (other reflectors use it; the caller closes it).
 */
export function startReflector<T extends KubeObject>(
  client: KubeClient,
  o: Omit<ReflectorOptions<T>, "client" | "store" | "onEvent">,
  { shared = false }: { shared?: boolean } = {},
): Running<T> {
  const store = new Store<T>({ freeze: true });
  const events: ReflectorEvent[] = [];
  const calls: StoreCall[] = [];
  const rec = (type: StoreCall["type"]) => (obj: T) =>
    calls.push({ type, key: objectKey(obj), rv: obj.metadata?.resourceVersion ?? "" });
  store.addHandler({
    add: rec("add"),
    update: (_old, obj) => rec("update")(obj),
    delete: rec("delete"),
  });
  const reflector = new Reflector<T>({
    ...o,
    client,
    store,
    onEvent: (ev) => events.push(ev),
  });
  const ctl = new AbortController();
  const done = reflector.run(ctl.signal);
  return {
    reflector,
    store,
    client,
    events,
    calls,
    of: <K extends ReflectorEvent["type"]>(type: K) =>
      events.filter((e) => e.type === type) as Extract<ReflectorEvent, { type: K }>[],
    async stop() {
      ctl.abort();
      await done;
      if (!shared) client.close();
    },
  };
}
