/**
 * The TLS stack's one-time set-up, started on a thread other than the JavaScript one.
 *
 * Deno's TLS (rustls on aws-lc) initialises aws-lc's random generator the first time anything in
 * the process needs it: about 19 ms of CPU on this project's 2-core machine, paid once per process.
 * Left alone, the first TLS handshake pays it on the JavaScript thread, so the first request to the
 * apiserver takes ~26 ms instead of ~7 and nothing else runs meanwhile. Web Crypto's ECDSA key
 * generation runs on Deno's blocking thread pool and needs the same generator, so starting one at
 * the very beginning of a process does the set-up in parallel with the evaluation of the modules.
 * HMAC and AES key generation would not do: Deno makes those keys on the calling thread.
 * Measurements: docs/design/transport.md, "The first handshake".
 *
 * @module
 */

let started = false;

/**
 * Starts the process's TLS crypto set-up on Deno's blocking thread pool (one throwaway ECDSA P-256
 * key, never used) and returns at once. Call it as early as possible: main.ts does it before any
 * other module is evaluated, and the client's credentials (credentials.ts) call it before their first
 * `Deno.createHttpClient`. Idempotent (the first call of the process does the work); never throws,
 * whatever Web Crypto does.
 */
export function warmUpTls(): void {
  if (started) return;
  started = true;
  try {
    crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, false, ["sign"])
      .catch(() => {});
  } catch {
    // No usable Web Crypto: the first handshake pays the set-up, as without this function.
  }
}
