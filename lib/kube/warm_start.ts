/**
 * Imported for its side effect, as the first import of an entry module (main.ts): starts
 * {@link warmUpTls} before the modules imported after it are evaluated (ES modules are evaluated
 * in the order of their imports), so the TLS set-up runs beside their evaluation.
 *
 * @module
 */
import { warmUpTls } from "./tls_warmup.ts";

warmUpTls();
