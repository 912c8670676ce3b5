// What a node remembers for a few seconds of something the database holds (a service user's state,
// an organization, a client's secrets), read through on a miss. A read that was under way when this
// node changed the thing is not kept: it would put the state from before the change back for the
// cache's whole lifetime. Other nodes' changes show within the time-to-live.
import { LRUCache } from 'lru-cache';

const MISSING = Symbol('missing');

type Load<K, V> = (key: K) => Promise<V | null | undefined>;

export interface ReadThroughOptions<K, V> {
  /** How a key is read; a caller may pass another to `get` and `read` (for keys that do not carry all a read needs). */
  load?: Load<K, V>;
  max: number;
  ttlMs: number;
  /** Remember that a key has no value (default), or read again each time it is asked for. */
  rememberMissing?: boolean;
}

export class ReadThroughCache<K extends {}, V extends {}> {
  readonly #cache: LRUCache<K, V | typeof MISSING>;
  readonly #load: Load<K, V> | undefined;
  readonly #rememberMissing: boolean;
  /** Counts what has been forgotten: a read that started before a forget is not kept. */
  #forgotten = 0;

  constructor(options: ReadThroughOptions<K, V>) {
    this.#load = options.load;
    this.#cache = new LRUCache({ max: options.max, ttl: options.ttlMs });
    this.#rememberMissing = options.rememberMissing ?? true;
  }

  /** What is remembered (null: that there is none), or undefined when it must be read. */
  known(key: K): V | null | undefined {
    const hit = this.#cache.get(key);
    return hit === MISSING ? null : hit;
  }

  /** What is remembered, else a read of it. */
  async get(key: K, load = this.#load): Promise<V | null> {
    const hit = this.known(key);
    return hit !== undefined ? hit : this.read(key, load);
  }

  /** A fresh read, remembered unless something was forgotten while it ran. */
  async read(key: K, load = this.#load): Promise<V | null> {
    if (load === undefined) throw new Error('ReadThroughCache: no way to read a key was given');
    const before = this.#forgotten;
    const value = (await load(key)) ?? null;
    if (value === null && !this.#rememberMissing) this.#cache.delete(key);
    else if (this.#forgotten === before) this.#cache.set(key, value ?? MISSING);
    return value;
  }

  /** Forgets one key, or everything; reads under way are not kept either. */
  forget(key?: K): void {
    this.#forgotten++;
    if (key === undefined) this.#cache.clear();
    else this.#cache.delete(key);
  }
}
