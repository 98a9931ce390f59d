/** The conversation list (REST list + search, delete and restore), beside the chat model. */

import type { Conversation, Rest } from "./types.js";

export class ConversationsModel {
  items = $state<Conversation[]>([]);
  q = $state("");
  includeArchived = $state(false);
  loading = $state(false);
  failed = $state(false);
  /** The last deleted one, for the «Восстановить» undo. */
  lastDeleted = $state<Conversation | null>(null);

  #rest: Rest;
  #seq = 0;

  constructor(rest: Rest) {
    this.#rest = rest;
  }

  async load(): Promise<void> {
    const mine = ++this.#seq; // a later search wins over an earlier slow one
    this.loading = true;
    try {
      const page = await this.#rest.conversations({ q: this.q.trim() || undefined, includeArchived: this.includeArchived });
      if (mine !== this.#seq) return;
      this.items = page.items;
      this.failed = false;
    } catch {
      if (mine === this.#seq) this.failed = true;
    } finally {
      if (mine === this.#seq) this.loading = false;
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
