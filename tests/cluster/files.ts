/**
 * The control plane's binaries, for tests that run its kubectl (tests/e2e/chart.ts): build.sh
 * lives in the `./testing` entry module (lib/testing/files.ts).
 * @module
 */
export { ensureBinaries } from "../../lib/testing/files.ts";
