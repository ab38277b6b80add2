/**
 * The AppService API's names, free of any schema library so that the running operator does not
 * load TypeBox (about 4 MB of RSS) just for constants. The schema itself is in schema.ts.
 *
 * @module
 */
import type { ResourceType } from "../kube/resources.ts";

/** API group of AppService. */
export const GROUP = "apps.our-org.com";
/** API version served and stored. */
export const VERSION = "v1";
/** Kind. */
export const KIND = "AppService";
/** Plural resource name. */
export const PLURAL = "appservices";
/** Finalizer the operator puts on every AppService it manages. */
export const FINALIZER = "apps.our-org.com/finalizer";

/** REST addressing of AppServices for the client. */
export const APPSERVICES: ResourceType = {
  apiVersion: `${GROUP}/${VERSION}`,
  kind: KIND,
  plural: PLURAL,
  namespaced: true,
};

/** Name of the single container in each Pod (env `resourceFieldRef.containerName` may name it). */
export const CONTAINER_NAME = "app";
