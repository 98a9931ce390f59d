/** The /chat endpoint through the real @gradio/client (docs/protocol.md §1–§2). A new Client is
 * made per connect with the token `getToken()` gives then (headers are fixed at connect); the
 * token lives only inside that client, in memory. */

import { Client } from "@gradio/client";
import type { ChatPayload, StreamMessage, Submission, Transport } from "./types.js";

export interface GradioOptions {
  gradioUrl: string;
  getToken: () => Promise<string | null>;
  fetch?: typeof fetch;
}

/** The welcome chips: the `examples` a component of the Blocks config declares (the Chatbot's,
 * docs/protocol.md §1), as `{text}` objects or strings. */
export function examplesFrom(config: unknown): string[] {
  const comps = (config as { components?: unknown[] } | null)?.components ?? [];
  const out: string[] = [];
  for (const c of comps) {
    const ex = (c as { props?: { examples?: unknown } }).props?.examples;
    if (!Array.isArray(ex)) continue;
    for (const e of ex) {
      const text = typeof e === "string" ? e : (e as { text?: unknown } | null)?.text;
      if (typeof text === "string" && text && !out.includes(text)) out.push(text);
    }
  }
  return out;
}

export function createGradioTransport(opts: GradioOptions): Transport {
  const base = opts.gradioUrl.replace(/\/?$/, "/");
  const doFetch = opts.fetch ?? ((input, init) => fetch(input, init));
  let client: Client | null = null;
  let connectedWith: string | null = null;
  let generation = 0;

  async function connect(): Promise<{ examples: string[] }> {
    const mine = ++generation;
    const token = await opts.getToken();
    const headers: Record<string, string> = token ? { Authorization: `Bearer ${token}` } : {};
    const next = await Client.connect(base, { headers, events: ["data", "status"] });
    if (mine !== generation) {
      // A later connect started meanwhile (the model gave this one up): never let a late
      // answer replace, and close, the client a newer submit is streaming on.
      next.close();
      throw new Error("superseded by a newer connect");
    }
    client?.close();
    client = next;
    connectedWith = token;
    return { examples: examplesFrom(next.config) };
  }

  return {
    connect,
    async submit(payload: ChatPayload): Promise<Submission> {
      // A new token (another user, a refreshed login) needs a new client: headers are per client.
      if (!client || (await opts.getToken()) !== connectedWith) await connect();
      const sub = client!.submit("/chat", { ...payload });
      return {
        [Symbol.asyncIterator]: () => sub[Symbol.asyncIterator]() as AsyncIterator<StreamMessage>,
        cancel: () => sub.cancel(),
      };
    },
    async probe(): Promise<boolean> {
      try {
        const r = await doFetch(`${base}gradio_api/app_id`, { cache: "no-store" });
        return r.ok;
      } catch {
        return false;
      }
    },
  };
}
