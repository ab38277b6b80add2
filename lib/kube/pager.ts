/**
 * Paged lists: every page of a list read in turn, each handed over before the next is asked
 * for, with client-go's fallback (`FullListIfExpired`) to one full list when a continue token
 * expires. The contract is `KubeClient.listPages`' (lib/kube/client.ts).
 *
 * @module
 */
import type { ObjectList } from "./client.ts";
import { ApiError, isGone } from "./errors.ts";
import { type ListOptions, pageOptions } from "./params.ts";

/** What {@link listInPages} resolves: the snapshot's resourceVersion and the counts. */
export interface PagedList {
  /** The resourceVersion of the snapshot the pages belong to. */
  resourceVersion: string;
  /** Pages handed to `onPage`. */
  pages: number;
  /** Items in them. */
  items: number;
  /** A continue token expired and the list was read again in one piece. */
  expired: boolean;
}

/**
 * Lists page by page with `list` (one page of the given options) and hands each page to
 * `onPage`; at most 100,000 pages. A 410 on a page after the first (an expired continue token)
 * calls `onExpired`, then reads the list in one piece ({@link fullList}).
 * @throws ApiError 410 for the first page or the full list; what `list` and `onPage` throw
 */
export async function listInPages<T>(
  list: (o: ListOptions) => Promise<ObjectList<T>>,
  o: ListOptions,
  onPage: (page: ObjectList<T>) => void | Promise<void>,
  onExpired?: (err: ApiError) => void,
): Promise<PagedList> {
  let cont: string | undefined;
  let rv: string | undefined;
  let pages = 0;
  let items = 0;
  do {
    let page: ObjectList<T> | undefined;
    try {
      page = await list(pageOptions(o, cont));
    } catch (err) {
      if (!cont || !(err instanceof ApiError) || !isGone(err)) throw err;
      onExpired?.(err);
      return { ...await fullList(list, o, onPage), pages: pages + 1, expired: true };
    }
    pages++;
    rv ??= page.metadata?.resourceVersion ?? "";
    items += page.items?.length ?? 0;
    cont = page.metadata?.continue || undefined;
    await onPage(page);
    // Let this page go before the next request is awaited (a suspended async function keeps
    // what its variables still point at).
    page = undefined;
  } while (cont && pages < 100_000);
  return { resourceVersion: rv ?? "", pages, items, expired: false };
}

/**
 * The list in one piece (no `limit`, no continue token, the caller's `resourceVersion`: still a
 * consistent read), handed to `onPage`: the fallback after an expired continue token.
 */
async function fullList<T>(
  list: (o: ListOptions) => Promise<ObjectList<T>>,
  o: ListOptions,
  onPage: (page: ObjectList<T>) => void | Promise<void>,
): Promise<{ resourceVersion: string; items: number }> {
  let full: ObjectList<T> | undefined = await list({ ...o, limit: undefined, continue: undefined });
  const items = full.items?.length ?? 0;
  const resourceVersion = full.metadata?.resourceVersion ?? "";
  await onPage(full);
  full = undefined;
  return { resourceVersion, items };
}
