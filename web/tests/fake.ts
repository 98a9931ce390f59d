/** A Transport and Rest that replay recorded messages (tests/fixtures/, from the real stack).
 *
 * Like @gradio/client, every data message of a submit carries the same object, patched in place:
 * a model that kept the object instead of a copy would see its past events change. */

import type { Active, ChatPayload, Conversation, HistoryMessage, Rest, StreamMessage, Submission, Transport } from "../src/lib/model/types.js";
import { RestError, UNREACHABLE } from "../src/lib/model/types.js";

export interface Fixture {
  name: string;
  submits: { payload: unknown; messages: StreamMessage[] }[];
  [k: string]: unknown;
}

export async function fixture(name: string): Promise<Fixture> {
  const mod = (await import(`./fixtures/${name}.json`)) as { default: Fixture };
  return structuredClone(mod.default);
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** Turn `target` into `src` in place, nested objects and arrays included, as the client's diffs
 * do: a reference kept from an earlier event sees the later one. */
function patch(target: Record<string, unknown> | unknown[], src: Record<string, unknown> | unknown[]): void {
  if (Array.isArray(target) && Array.isArray(src)) {
    target.length = src.length;
    src.forEach((v, i) => {
      const t = target[i];
      if ((isObj(t) && isObj(v)) || (Array.isArray(t) && Array.isArray(v))) patch(t, v);
      else target[i] = structuredClone(v);
    });
    return;
  }
  const t = target as Record<string, unknown>;
  const o = src as Record<string, unknown>;
  for (const k of Object.keys(t)) if (!(k in o)) delete t[k];
  for (const [k, v] of Object.entries(o)) {
    const cur = t[k];
    if ((isObj(cur) && isObj(v)) || (Array.isArray(cur) && Array.isArray(v))) patch(cur, v);
    else t[k] = structuredClone(v);
  }
}

/** A scripted submit: recorded messages, optionally cut (the connection drops after `cutAfter`
 * data messages: a status error, as @gradio/client reports a broken stream). */
export interface Script {
  messages: StreamMessage[];
  cutAfter?: number;
  /** Hold the stream open after the messages (until cancelled), as a live run would. */
  hang?: boolean;
  /** While held open: a `heartbeat` event this often (ms), as the agent sends on a silent
   * stream (docs/protocol.md §2). */
  beatMs?: number;
}

export class FakeTransport implements Transport {
  scripts: Script[] = [];
  payloads: ChatPayload[] = [];
  connects = 0;
  /** How many of the next connects fail. */
  failConnects = 0;
  /** How many of the next connects never answer (a half-open connection). */
  hangConnects = 0;
  probeOk = true;
  cancelled = 0;
  examples = ["Что ты умеешь?", "Найди дашборды про энергопотребление"];

  queue(...scripts: Script[]): this {
    this.scripts.push(...scripts);
    return this;
  }

  async connect(): Promise<{ examples: string[] }> {
    this.connects += 1;
    if (this.hangConnects > 0) {
      this.hangConnects -= 1;
      return new Promise(() => undefined);
    }
    if (this.failConnects > 0) {
      this.failConnects -= 1;
      throw new Error("connect refused");
    }
    return { examples: [...this.examples] };
  }

  async probe(): Promise<boolean> {
    return this.probeOk;
  }

  async submit(payload: ChatPayload): Promise<Submission> {
    this.payloads.push(structuredClone(payload));
    const script = this.scripts.shift();
    if (!script) throw new Error(`no script for submit ${JSON.stringify(payload)}`);
    let cancelled = false;
    const self = this;
    const shared: Record<string, unknown> = {};
    async function* gen(): AsyncGenerator<StreamMessage> {
      let data = 0;
      for (const msg of script!.messages) {
        await Promise.resolve();
        if (cancelled) return;
        if (msg.type === "data") {
          if (script!.cutAfter !== undefined && data >= script!.cutAfter) {
            yield { type: "status", stage: "error", message: "Connection errored out. " };
            return;
          }
          data += 1;
          const ev = (msg as { data: unknown[] }).data[0] as Record<string, unknown>;
          patch(shared, ev);
          yield { type: "data", data: [shared] };
        } else {
          yield msg;
        }
      }
      let waited = 0;
      while (script!.hang && !cancelled) {
        await new Promise((r) => setTimeout(r, 50));
        waited += 50;
        if (script!.beatMs && waited % script!.beatMs === 0 && !cancelled) {
          const last = shared.metadata as Record<string, unknown> | undefined;
          patch(shared, { role: "assistant", content: "", metadata: {
            type: "heartbeat", seq: last?.seq ?? 0, run_id: last?.run_id ?? null, conversation_id: last?.conversation_id ?? null } });
          yield { type: "data", data: [shared] };
        }
      }
    }
    const it = gen();
    return {
      [Symbol.asyncIterator]: () => it,
      cancel: () => { cancelled = true; self.cancelled += 1; },
    };
  }
}

type Handler<T> = T | (() => T | Promise<T>);
/** A page answer, or a function of the cursor asked for. */
type Paged<T> = T | ((cursor: string | null) => T | Promise<T>);

export class FakeRest implements Rest {
  list: Paged<{ items: Conversation[]; next_cursor: string | null }> = { items: [], next_cursor: null };
  historyPage: Paged<{ items: HistoryMessage[]; next_cursor: string | null }> = { items: [], next_cursor: null };
  activeAnswer: Handler<Active> = { active: false, until: null, run: null };
  calls: string[] = [];

  async #get<T>(h: Handler<T>): Promise<T> {
    return structuredClone(typeof h === "function" ? await (h as () => T | Promise<T>)() : h);
  }
  /** Pages by cursor when given a function of it. */
  conversations(q: { q?: string; includeArchived?: boolean; cursor?: string | null }) {
    this.calls.push(`list ${q.q ?? ""} ${q.includeArchived ? "archived" : ""} ${q.cursor ?? ""}`.trim());
    const h = this.list;
    return this.#get(typeof h === "function" ? () => h(q.cursor ?? null) : h);
  }
  renameAnswer: Handler<Conversation> | null = null;
  async rename(id: string, title: string) {
    this.calls.push(`rename ${id} ${title}`);
    if (this.renameAnswer) return this.#get(this.renameAnswer);
    return { id, title, created_at: "", last_activity_at: "", is_archived: false, archived_at: null };
  }
  cancelAnswer: Handler<{ run_id: string; status: string }> = { run_id: "", status: "cancelled" };
  cancelRun(cid: string, runId: string, tabId: string) {
    this.calls.push(`cancel ${cid} ${runId} ${tabId}`);
    return this.#get(this.cancelAnswer);
  }
  branch(cid: string, messageId: string, tabId: string) {
    this.calls.push(`branch ${cid} ${messageId} ${tabId}`);
    return Promise.resolve({ conversation_id: cid, leaf_id: messageId });
  }
  async remove(id: string) {
    this.calls.push(`delete ${id}`);
    return { id, title: "t", created_at: "", last_activity_at: "", is_archived: true, archived_at: "" };
  }
  async restore(id: string) {
    this.calls.push(`restore ${id}`);
    return { id, title: "t", created_at: "", last_activity_at: "", is_archived: false, archived_at: null };
  }
  history(cid: string, _limit?: number, cursor?: string | null) {
    this.calls.push(`history ${cid}${cursor ? ` ${cursor}` : ""}`);
    const h = this.historyPage;
    return this.#get(typeof h === "function" ? () => h(cursor ?? null) : h);
  }
  active(cid: string) {
    this.calls.push(`active ${cid}`);
    return this.#get(this.activeAnswer);
  }
}

export const unreachable = (): never => {
  throw new RestError(0, UNREACHABLE, "fetch failed");
};
