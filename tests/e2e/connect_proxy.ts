/**
 * The HTTP CONNECT proxy of the client's proxy-support tests: it lives in the `./testing` entry
 * module (lib/testing/connect_proxy.ts) and is re-exported here for the tests that import it from
 * this folder.
 * @module
 */
export { ConnectProxy } from "../../lib/testing/connect_proxy.ts";
