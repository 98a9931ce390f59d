/** Where the panel's three endpoints are, from the agent's base URL (docs/protocol.md §9:
 * REST conversations live at /api/assistant, a sibling of /api/agent). */

export interface Urls {
  agent: string;
  gradio: string;
  assistant: string;
}

/** An absolute URL without trailing slashes: @gradio/client cannot connect to a path alone,
 * so a relative base ("/api/agent") is resolved against the page (`here`). */
function absolute(url: string, here: string | undefined): string {
  let out = url;
  try {
    out = new URL(url, here).href;
  } catch {
    // no page to resolve against (tests, SSR): keep what the host gave
  }
  return out.replace(/\/+$/, "");
}

export function urls(baseUrl: string, gradioUrl?: string, assistantUrl?: string,
                     here: string | undefined = typeof location === "undefined" ? undefined : location.href): Urls {
  const agent = absolute(baseUrl, here);
  return {
    agent,
    gradio: absolute(gradioUrl ?? `${agent}/gradio`, here),
    assistant: absolute(assistantUrl ?? (/\/agent$/.test(agent) ? agent.replace(/\/agent$/, "/assistant") : `${agent}/assistant`), here),
  };
}

const TAB_KEY = "agentchat.tab_id";

/** A random id per browser tab (sessionStorage is per tab and survives reloads); it holds the
 * multi-tab lease across reconnects and is not a secret. */
export function defaultTabId(storage: Storage | undefined = typeof sessionStorage === "undefined" ? undefined : sessionStorage): string {
  const fresh = (): string => `tab-${crypto.randomUUID()}`;
  if (!storage) return fresh();
  try {
    const kept = storage.getItem(TAB_KEY);
    if (kept && /^[A-Za-z0-9._:-]{1,128}$/.test(kept)) return kept;
    const id = fresh();
    storage.setItem(TAB_KEY, id);
    return id;
  } catch {
    return fresh(); // storage refused (privacy mode): one id per panel
  }
}

const RUNS_KEY = "agentchat.own_runs";

/** The runs this tab started, in sessionStorage (ids, not secrets): see ModelOptions.ownRuns. */
export function sessionRuns(storage: Storage | undefined = typeof sessionStorage === "undefined" ? undefined : sessionStorage): { load(): string[]; save(ids: string[]): void } {
  return {
    load: () => {
      try {
        const v: unknown = JSON.parse(storage?.getItem(RUNS_KEY) ?? "[]");
        return Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : [];
      } catch {
        return [];
      }
    },
    save: (ids) => {
      try {
        storage?.setItem(RUNS_KEY, JSON.stringify(ids));
      } catch {
        // storage refused: the gate may show for up to a lease after a reload, nothing worse
      }
    },
  };
}
