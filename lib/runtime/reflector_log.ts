/**
 * How a reflector reports itself: one log line and the metrics of each {@link ReflectorEvent}
 * (client-go's reflector logs for itself too). The messages people and tests match on are in
 * {@link MESSAGES}.
 *
 * @module
 */
import type { ConnectionHealth } from "../kube/connection.ts";
import { ApiError } from "../kube/errors.ts";
import type { ResourceType } from "../kube/resources.ts";
import { unreachable } from "./controller.ts";
import { errorText, log } from "./log.ts";
import { MESSAGES, OUTAGE_NOTE } from "./messages.ts";
import type { Metrics } from "./metrics.ts";
import type { ReflectorEvent } from "./reflector_machine.ts";

/** One log level: a message and its structured properties (LogTape's `Logger` fits). */
export type LogLevelFn = (message: string, props: Record<string, unknown>) => void;

/** Where a reflector logs (a LogTape `Logger`, or a wrapper that holds lines back). */
export interface ReflectorLogger {
  /** Normal progress (a list applied, a deaf watch reopened). */
  info: LogLevelFn;
  /** Trouble (a failed list or watch, a 410). */
  warn: LogLevelFn;
  /** Routine (watch started and ended, failures during a reported outage). */
  debug: LogLevelFn;
}

/** The metrics a reflector counts, labelled by `resource` (its plural). */
export type ReflectorMetrics = Pick<
  Metrics,
  "reflectorLists" | "reflectorRelists" | "reflectorWatchErrors" | "reflectorWatchesOpen"
>;

/** What {@link reflectorReporter} needs. */
export interface ReflectorReporterOptions {
  /** The reflector's resource (its plural labels the metrics). */
  resource: ResourceType;
  /** Where to log. */
  logger: ReflectorLogger;
  /** What to count; none if absent. */
  metrics?: ReflectorMetrics;
  /** The client's connection health: while the apiserver is unreachable one line tells it. */
  health?: ConnectionHealth;
}

/**
 * A function that logs and counts one reflector event (the series start at 0 when it is made).
 * Levels: `listed`, `listExpired`, `restart` and a non-quiet `idle` at info; `relist` and failures
 * at warn, except failures while the apiserver is unreachable after the one line that reports the
 * outage ({@link ConnectionHealth.claimReport}), which go to debug; the rest at debug.
 */
export function reflectorReporter(o: ReflectorReporterOptions): (ev: ReflectorEvent) => void {
  const { logger, metrics, health, resource } = o;
  const labels = { resource: resource.plural };
  metrics?.reflectorLists.inc(labels, 0);
  metrics?.reflectorRelists.inc(labels, 0);
  metrics?.reflectorWatchErrors.inc(labels, 0);
  metrics?.reflectorWatchesOpen.inc(labels, 0);
  return (ev) => {
    switch (ev.type) {
      case "listed":
        metrics?.reflectorLists.inc(labels);
        logger.info(MESSAGES.listed, {
          resourceVersion: ev.resourceVersion,
          items: ev.items,
          pages: ev.pages,
          added: ev.added,
          updated: ev.updated,
          deleted: ev.deleted,
        });
        return;
      case "watchStarted":
        return logger.debug("Watch started", { resourceVersion: ev.resourceVersion });
      case "watchEnded":
        return logger.debug("Watch ended", {
          resourceVersion: ev.resourceVersion,
          events: ev.events,
        });
      case "relist":
        metrics?.reflectorRelists.inc(labels);
        return logger.warn(ev.phase === "list" ? MESSAGES.listGone : MESSAGES.relisting, {
          resourceVersion: ev.resourceVersion,
        });
      case "listExpired":
        return logger.info(MESSAGES.listContinueExpired, { detail: ev.detail });
      case "idle":
        // A quiet stream (no bookmarks expected) reopening is routine; otherwise it was deaf.
        return (ev.quiet ? logger.debug : logger.info)(MESSAGES.watchIdle, {
          resourceVersion: ev.resourceVersion,
          idleMs: ev.idleMs,
          quiet: ev.quiet,
        });
      case "restart":
        return logger.info("Watch restarted", {
          why: ev.why,
          resourceVersion: ev.resourceVersion,
          detail: ev.detail,
        });
      case "error": {
        metrics?.reflectorWatchErrors.inc(labels);
        const down = unreachable(ev.error, health);
        const claimed = down && (health?.claimReport() ?? false);
        return (down && !claimed ? logger.debug : logger.warn)(
          ev.phase === "list" ? "List failed" : "Watch failed",
          {
            error: errorText(ev.error),
            retryInMs: Math.round(ev.retryInMs),
            ...(claimed ? { outage: OUTAGE_NOTE } : {}),
            ...listWatchHint(ev.error, resource),
          },
        );
      }
      default: {
        const never: never = ev;
        logger.debug("Reflector event", { event: never });
      }
    }
  };
}

/**
 * What a newcomer needs next to a failed list or watch (the log's `hint`): a 404 means the
 * apiserver does not serve the resource type (a CRD not installed, or deleted), a 403 that the
 * user may not list or watch it (RBAC). Branches on the HTTP code only; `{}` for anything else.
 */
export function listWatchHint(err: unknown, resource: ResourceType): { hint?: string } {
  if (!(err instanceof ApiError)) return {};
  const what = `${resource.plural} (${resource.apiVersion})`;
  if (err.code === 404) {
    return {
      hint: `the apiserver does not serve ${what}: is its CustomResourceDefinition installed?`,
    };
  }
  if (err.code === 403) {
    return { hint: `this user may not list or watch ${what}: check its RBAC` };
  }
  return {};
}

/** The runtime's `reflector` log category with the resource's plural as `resource`. */
export function defaultReflectorLogger(resource: ResourceType): ReflectorLogger {
  const l = log("reflector").with({ resource: resource.plural });
  return {
    info: (m, p) => l.info(m, p),
    warn: (m, p) => l.warn(m, p),
    debug: (m, p) => l.debug(m, p),
  };
}
