/**
 * The loopback fault proxy the end-to-end tests put between a client and the apiserver: it lives
 * in the `./testing` entry module (lib/testing/fault_proxy.ts) and is re-exported here for the
 * tests that import it from this folder.
 * @module
 */
export { type ProxyMode, TcpProxy } from "../../lib/testing/fault_proxy.ts";
