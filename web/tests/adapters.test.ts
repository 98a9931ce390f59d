// The adapters around the model: REST calls (paths, the token asked each time and never kept,
// errors), the welcome chips from the recorded Gradio config, URLs, the tab id, the page's config
// and dev tokens, the language rule.
import { describe, expect, it } from "vitest";
import { browserLang, WORDS } from "../src/lib/i18n.js";
import { createRest } from "../src/lib/model/rest.js";
import { examplesFrom } from "../src/lib/model/transport.js";
import { RestError } from "../src/lib/model/types.js";
import { defaultTabId, urls } from "../src/lib/urls.js";
import { devTokens, loadConfig } from "../src/page/config.js";
import config from "./fixtures/gradio_config_examples.json";
import recorded from "./fixtures/rest.json";

type Call = { url: string; init: RequestInit };

function fakeFetch(answer: (url: string) => Response | Promise<Response>) {
  const calls: Call[] = [];
  const f = (async (input: RequestInfo | URL, init?: RequestInit) => {
    calls.push({ url: String(input), init: init ?? {} });
    return answer(String(input));
  }) as typeof fetch;
  return { f, calls };
}
const json = (body: unknown, status = 200) =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });

describe("REST", () => {
  it("paths and query as docs/protocol.md §9; a fresh token on every call", async () => {
    let n = 0;
    const { f, calls } = fakeFetch(() => json(recorded.list.body));
    const rest = createRest({ assistantUrl: "/api/assistant", agentUrl: "/api/agent",
                              getToken: async () => `t${++n}`, fetch: f });
    const page = await rest.conversations({ q: "энергопотребление", includeArchived: true });
    expect(page.items[0]!.id).toBe(recorded.list.body.items[0]!.id);
    await rest.history("c 1");
    await rest.active("c1");
    await rest.remove("c1");
    await rest.restore("c1");
    await rest.conversations({ cursor: "k/1" });
    await rest.history("c1", 50, "h1");
    await rest.rename("c1", "Отчёт");
    await rest.cancelRun("c1", "r 1", "tab-1");
    expect(calls.map((c) => `${c.init.method} ${c.url}`)).toEqual([
      "GET /api/assistant/conversations?limit=50&q=%D1%8D%D0%BD%D0%B5%D1%80%D0%B3%D0%BE%D0%BF%D0%BE%D1%82%D1%80%D0%B5%D0%B1%D0%BB%D0%B5%D0%BD%D0%B8%D0%B5&include_archived=true",
      "GET /api/assistant/history?conversation_id=c+1&limit=50",
      "GET /api/agent/conversations/c1/active",
      "DELETE /api/assistant/conversations/c1",
      "POST /api/assistant/conversations/c1/restore",
      "GET /api/assistant/conversations?limit=50&cursor=k%2F1",
      "GET /api/assistant/history?conversation_id=c1&limit=50&cursor=h1",
      "PATCH /api/assistant/conversations/c1",
      "POST /api/agent/conversations/c1/runs/r%201/cancel",
    ]);
    expect(calls.map((c) => (c.init.headers as Record<string, string>).authorization))
      .toEqual(["Bearer t1", "Bearer t2", "Bearer t3", "Bearer t4", "Bearer t5", "Bearer t6", "Bearer t7", "Bearer t8", "Bearer t9"]);
    expect(calls.slice(-2).map((c) => c.init.body)).toEqual(['{"title":"Отчёт"}', '{"tab_id":"tab-1"}']);
    expect((calls.at(-1)!.init.headers as Record<string, string>)["content-type"]).toBe("application/json");
  });

  it("no token (an ingress adds it): no Authorization header", async () => {
    const { f, calls } = fakeFetch(() => json(recorded.idle.body));
    const rest = createRest({ assistantUrl: "/a", agentUrl: "/g", getToken: async () => null, fetch: f });
    await rest.active("c1");
    expect(Object.keys(calls[0]!.init.headers as object)).not.toContain("authorization");
  });

  it("errors: the API's {code, detail}; a gateway or no answer is unreachable", async () => {
    const mk = (r: () => Response | Promise<Response>) =>
      createRest({ assistantUrl: "/a", agentUrl: "/g", getToken: async () => null, fetch: fakeFetch(r).f });
    const err = await mk(() => json(recorded.missing.body, 404)).history("x").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RestError);
    expect(err).toMatchObject({ status: 404, code: "NOT_FOUND", unreachable: false });
    const storage = await mk(() => json({ code: "STORAGE_UNAVAILABLE", detail: "db" }, 503)).history("x").catch((e: unknown) => e);
    expect((storage as RestError).unreachable).toBe(false); // the agent answered
    const gw = await mk(() => new Response("<html>bad gateway</html>", { status: 502 })).history("x").catch((e: unknown) => e);
    expect((gw as RestError).unreachable).toBe(true);
    const down = await mk(() => { throw new TypeError("fetch failed"); }).history("x").catch((e: unknown) => e);
    expect((down as RestError).unreachable).toBe(true);
  });
});

describe("the Gradio config", () => {
  it("the welcome chips are the Chatbot's examples (recorded from the real app)", () => {
    expect(examplesFrom(config)).toEqual(config.components[0]!.props.examples.map((e) => e.text));
    expect(examplesFrom(config)).toContain("Найди дашборды про энергопотребление");
    expect(examplesFrom({ components: [{ props: { examples: ["a", { text: "b" }, { files: [] }, "a"] } }] })).toEqual(["a", "b"]);
    expect(examplesFrom(null)).toEqual([]);
  });
});

describe("URLs and the tab id", () => {
  it("REST conversations are a sibling of /api/agent", () => {
    expect(urls("https://h/api/agent/")).toEqual({
      agent: "https://h/api/agent", gradio: "https://h/api/agent/gradio", assistant: "https://h/api/assistant" });
    expect(urls("/x", "/g/", "/r").gradio).toBe("/g");
    expect(urls("/x").assistant).toBe("/x/assistant");
    // a relative base is resolved against the page: @gradio/client needs an absolute URL
    expect(urls("/api/agent", undefined, undefined, "https://h/app/page")).toEqual({
      agent: "https://h/api/agent", gradio: "https://h/api/agent/gradio", assistant: "https://h/api/assistant" });
  });

  it("one tab id per tab, kept in sessionStorage, valid for the server", () => {
    const store = new Map<string, string>();
    const storage = { getItem: (k: string) => store.get(k) ?? null, setItem: (k: string, v: string) => void store.set(k, v) } as Storage;
    const a = defaultTabId(storage);
    expect(a).toMatch(/^[A-Za-z0-9._:-]{1,128}$/);
    expect(defaultTabId(storage)).toBe(a);
    expect(defaultTabId(undefined)).not.toBe(a);
  });
});

describe("the page", () => {
  it("reads config.json next to itself", async () => {
    const { f, calls } = fakeFetch(() => json({ api_base: "/api/agent", dev: true, demo_users: [{ id: "alice", label: "Alice" }] }));
    const c = await loadConfig(new URL("https://h/api/agent/ui/"), f);
    expect(calls[0]!.url).toBe("https://h/api/agent/ui/config.json");
    expect(c).toEqual({ api_base: "/api/agent", gradio_path: "/api/agent/gradio", assistant_base: undefined,
                        dev: true, demo_users: [{ id: "alice", label: "Alice" }] });
  });

  it("dev tokens: POST dev/token per user, kept in memory until near expiry", async () => {
    const exp = Math.floor(Date.now() / 1000) + 3600;
    const jwt = (sub: string) => `x.${btoa(JSON.stringify({ sub, exp }))}.y`;
    const { f, calls } = fakeFetch(async () => json({ token: jwt("alice") }));
    const mint = devTokens(new URL("https://h/api/agent/ui/"), f);
    expect(await mint("alice")).toBe(jwt("alice"));
    await mint("alice");
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({ url: "https://h/api/agent/ui/dev/token", init: { method: "POST", body: '{"user":"alice"}' } });
    await mint("bob");
    expect(calls).toHaveLength(2);
  });
});

describe("words", () => {
  it("English for an English browser, else Russian", () => {
    expect(browserLang("en-US")).toBe("en");
    expect(browserLang("en")).toBe("en");
    expect(browserLang("ru-RU")).toBe("ru");
    expect(browserLang("de-DE")).toBe("ru");
    expect(browserLang(undefined)).toBe("ru");
  });

  it("both languages have every word, and 002's Russian texts are exact", () => {
    expect(Object.keys(WORDS.en).sort()).toEqual(Object.keys(WORDS.ru).sort());
    expect(WORDS.ru.reconnectingIn(5)).toBe("Агент недоступен. Переподключение через 5с...");
    expect(WORDS.ru.retryRequest).toBe("Повторить запрос?");
    expect(WORDS.ru.welcome).toBe("Новый диалог");
    expect(WORDS.ru.toolRetrying(1, 2)).toBe("Повторная попытка... (1/2)");
  });
});
