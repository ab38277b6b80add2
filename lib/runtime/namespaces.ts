/**
 * Namespaces in which nothing can be created any more, remembered from the apiserver's first
 * answer that says so (docs/scenarios.md S21), so that a controller stops creating there — Events included — instead
 * of fighting the namespace controller while it deletes the namespace's content.
 *
 * The apiserver's NamespaceLifecycle admission plugin refuses every create in a namespace whose
 * phase is Terminating with 403 Forbidden and a StatusCause of type `NamespaceTerminating`, and
 * with 404 (kind `namespaces`) once it is gone ({@link isNamespaceClosed}). Deletes, updates and
 * patches of existing objects are still admitted, so finalizers can still be removed.
 *
 * A namespace of the same name can be made again later, and objects made in it must be served.
 * So the memo is kept per object: it holds the uids of the primary objects that lived in the
 * namespace when the refusal came (every one the controller's cache holds there, through
 * `members`). A primary object made later has a new uid and is not held back; one the cache did
 * not know yet costs one more refusal, then joins. An entry goes with its last object
 * ({@link TerminatingNamespaces.forget} from the informer's delete handler), so the memo never
 * grows with namespaces that are gone.
 *
 * @module
 */
import { isNamespaceClosed } from "../kube/errors.ts";

/** See the module doc. */
export class TerminatingNamespaces {
  #byNamespace = new Map<string, Set<string>>();
  #members?: (namespace: string) => Iterable<string>;

  /**
   * Makes an empty memo.
   * @param members uids of the primary objects the controller knows in a namespace (e.g. from its
   *   cache); all of them are held back when one create there is refused. Without it, only the
   *   object named in each refusal is.
   */
  constructor(members?: (namespace: string) => Iterable<string>) {
    this.#members = members;
  }

  /**
   * Notes an error of a create made for object `uid` in `namespace`: when it says the namespace
   * is closed ({@link isNamespaceClosed}), that object and every member of the namespace are held
   * back from now on. Returns whether it did.
   */
  observe(namespace: string, uid: string | undefined, err: unknown): boolean {
    if (!isNamespaceClosed(err)) return false;
    this.mark(namespace, uid);
    return true;
  }

  /**
   * Holds back every member of `namespace` (a refusal was seen for object `uid`). With a `members`
   * function, an object that is no member (already deleted) is not remembered: it would never be
   * forgotten.
   */
  mark(namespace: string, uid: string | undefined): void {
    const members = this.#members ? new Set(this.#members(namespace)) : new Set<string>();
    if (uid && !this.#members) members.add(uid);
    if (members.size === 0) return;
    let set = this.#byNamespace.get(namespace);
    if (!set) this.#byNamespace.set(namespace, set = new Set());
    for (const m of members) set.add(m);
  }

  /** Whether creates for object `uid` in `namespace` would be refused (see the module doc). */
  has(namespace: string | undefined, uid: string | undefined): boolean {
    if (!namespace || !uid) return false;
    return this.#byNamespace.get(namespace)?.has(uid) ?? false;
  }

  /** Forgets a deleted object; the namespace's entry goes with its last one. */
  forget(namespace: string | undefined, uid: string | undefined): void {
    if (!namespace || !uid) return;
    const set = this.#byNamespace.get(namespace);
    if (!set) return;
    set.delete(uid);
    if (set.size === 0) this.#byNamespace.delete(namespace);
  }

  /** Namespaces held now (for tests and metrics). */
  get size(): number {
    return this.#byNamespace.size;
  }
}
