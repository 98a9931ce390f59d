/** The page's runtime config (config.json next to the page, served by the agent) and the dev
 * token route. Tokens stay in memory, per demo user, re-minted before they expire. */

export interface DemoUser {
  id: string;
  label: string;
}

export interface PageConfig {
  api_base: string;
  gradio_path: string;
  assistant_base?: string;
  dev: boolean;
  demo_users: DemoUser[];
  /** docs/protocol.md §1's file limits and §2's heartbeat, as this agent has them. */
  max_files?: number;
  max_file_bytes?: number;
  max_files_total_bytes?: number;
  heartbeat_s?: number;
}

export async function loadConfig(base: URL, f: typeof fetch = fetch): Promise<PageConfig> {
  const r = await f(new URL("config.json", base), { cache: "no-store" });
  if (!r.ok) throw new Error(`config.json: HTTP ${r.status}`);
  const c = (await r.json()) as Partial<PageConfig>;
  return {
    api_base: c.api_base ?? "/api/agent",
    gradio_path: c.gradio_path ?? `${c.api_base ?? "/api/agent"}/gradio`,
    assistant_base: c.assistant_base,
    dev: c.dev === true,
    demo_users: Array.isArray(c.demo_users) ? c.demo_users : [],
    max_files: c.max_files,
    max_file_bytes: c.max_file_bytes,
    max_files_total_bytes: c.max_files_total_bytes,
    heartbeat_s: c.heartbeat_s,
  };
}

/** The `exp` claim (seconds), read only to know when to mint again; never verified here. */
function expiry(jwt: string): number {
  try {
    const payload = JSON.parse(atob(jwt.split(".")[1]!.replace(/-/g, "+").replace(/_/g, "/"))) as { exp?: number };
    return typeof payload.exp === "number" ? payload.exp * 1000 : 0;
  } catch {
    return 0;
  }
}

export function devTokens(base: URL, f: typeof fetch = fetch): (user: string) => Promise<string | null> {
  const kept = new Map<string, { token: string; until: number }>();
  return async (user) => {
    const k = kept.get(user);
    if (k && k.until - Date.now() > 60_000) return k.token;
    const r = await f(new URL("dev/token", base), {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ user }),
    });
    if (!r.ok) throw new Error(`dev/token: HTTP ${r.status}`);
    const { token } = (await r.json()) as { token: string };
    kept.set(user, { token, until: expiry(token) || Date.now() + 5 * 60_000 });
    return token;
  };
}
