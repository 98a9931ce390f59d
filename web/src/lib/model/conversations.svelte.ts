/** The conversation list (REST list + search, delete, restore and rename), beside the chat
 * model. Pages by keyset (`next_cursor`) as the user scrolls: `more()` appends the next page;
 * a search pages the same way. */

import { type Conversation, type Rest, RestError } from "./types.js";

const PAGE = 50;

export class ConversationsModel {
  items = $state<Conversation[]>([]);
  q = $state("");
  includeArchived = $state(false);
  loading = $state(false);
  failed = $state(false);
  /** Whether another page is there to load. */
  hasMore = $state(false);
  /** The last deleted one, for the «Восстановить» undo. */
  lastDeleted = $state<Conversation | null>(null);
  /** Why the last rename was refused (the server's detail), until the next one. */
  renameError = $state<string | null>(null);

  #rest: Rest;
  #seq = 0;
  #cursor: string | null = null;

  constructor(rest: Rest) {
    this.#rest = rest;
  }

  #query(cursor: string | null) {
    return { q: this.q.trim() || undefined, includeArchived: this.includeArchived, limit: PAGE, cursor };
  }

  /** The first page (a new search, a change): replaces the list. */
  async load(): Promise<void> {
    const mine = ++this.#seq; // a later search wins over an earlier slow one
    this.loading = true;
    try {
      const page = await this.#rest.conversations(this.#query(null));
      if (mine !== this.#seq) return;
      this.items = page.items;
      this.#cursor = page.next_cursor;
      this.hasMore = page.next_cursor !== null;
      this.failed = false;
    } catch {
      if (mine === this.#seq) this.failed = true;
    } finally {
      if (mine === this.#seq) this.loading = false;
    }
  }

  /** The next page, appended (the list's end scrolled into view). */
  async more(): Promise<void> {
    if (this.loading || !this.#cursor) return;
    const mine = this.#seq;
    this.loading = true;
    try {
      const page = await this.#rest.conversations(this.#query(this.#cursor));
      if (mine !== this.#seq) return; // a search started meanwhile: its page wins
      const seen = new Set(this.items.map((c) => c.id));
      this.items.push(...page.items.filter((c) => !seen.has(c.id)));
      this.#cursor = page.next_cursor;
      this.hasMore = page.next_cursor !== null;
    } catch {
      if (mine === this.#seq) this.failed = true;
    } finally {
      if (mine === this.#seq) this.loading = false;
    }
  }

  /** True when renamed; the list shows the new title at once. */
  async rename(c: Conversation, title: string): Promise<boolean> {
    const t = title.trim();
    this.renameError = null;
    if (!t || t === c.title) return !!t;
    try {
      const done = await this.#rest.rename(c.id, t);
      const i = this.items.findIndex((x) => x.id === c.id);
      if (i >= 0) this.items[i] = done;
      return true;
    } catch (e) {
      this.renameError = e instanceof RestError ? e.detail || e.code : String(e);
      return false;
    }
  }

  async remove(c: Conversation): Promise<void> {
    try {
      const done = await this.#rest.remove(c.id);
      this.lastDeleted = done;
    } catch {
      this.failed = true;
    }
    await this.load();
  }

  async restore(c: Conversation): Promise<void> {
    try {
      await this.#rest.restore(c.id);
      if (this.lastDeleted?.id === c.id) this.lastDeleted = null;
    } catch {
      this.failed = true;
    }
    await this.load();
  }
}
