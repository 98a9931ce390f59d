// Issue 36's states of the model: Markdown (safe, incremental), the heartbeat watchdog, Stop on
// a joined run, history and the conversation list paged by cursor, rename, attachments, words.
import { describe, expect, it } from "vitest";
import { WORDS } from "../src/lib/i18n.js";
import { parseMarkdown, MarkdownStream } from "../src/lib/markdown/stream.js";
import { safeLink } from "../src/lib/markdown/nodes.js";
import { AttachmentsModel } from "../src/lib/model/attachments.svelte.js";
import { ConversationsModel } from "../src/lib/model/conversations.svelte.js";
import { fromHistory } from "../src/lib/model/history.js";
import type { AssistantItem, Conversation, FileData, HistoryMessage, StreamMessage, ToolView } from "../src/lib/model/types.js";
import { RestError } from "../src/lib/model/types.js";
import { fixture } from "./fake.js";
import { settle, useModel } from "./harness.js";


describe("Markdown", () => {
  it("lists, a table, code and inline code are elements' nodes, not text with pipes", () => {
    const tree = parseMarkdown("- «Отчёт» (№42) — владелец carol\n- второй\n\n| a | b |\n|:--|--:|\n| 1 | `x` |\n\n```sql\nselect 1;\n```\n");
    expect(tree.map((b) => b.k)).toEqual(["list", "table", "code"]);
    const table = tree[1] as Extract<(typeof tree)[number], { k: "table" }>;
    expect(table.align).toEqual(["left", "right"]);
    expect(table.rows[0]![1]).toEqual([{ k: "code", text: "x" }]);
    expect(tree[2]).toEqual({ k: "code", lang: "sql", text: "select 1;" });
  });

  it("raw HTML stays text; only absolute http(s)/mailto links, with their host; images are links", () => {
    const tree = parseMarkdown('<script>alert(1)</script>\n\n[a](javascript:alert(1)) [b](https://ex.com/x?y) [c](/rel) ![pic](https://evil.test/p.png) <img src="https://evil.test/i.png">');
    expect(tree[0]).toEqual({ k: "p", c: [{ k: "text", text: "<script>alert(1)</script>" }] });
    const p = tree[1] as { k: "p"; c: { k: string; href?: string; shown?: string }[] };
    const links = p.c.filter((n) => n.k === "link");
    expect(links.map((l) => [l.href, l.shown])).toEqual([["https://ex.com/x?y", "ex.com"], ["https://evil.test/p.png", "evil.test"]]);
    expect(JSON.stringify(p.c)).toContain('<img src=\\"https://evil.test/i.png\\">'); // as text
    expect(safeLink("data:text/html,x")).toBeNull();
    expect(safeLink("mailto:a@b.org")).toEqual({ href: "mailto:a@b.org", shown: "a@b.org" });
  });

  it("streams incrementally: the same tree as one parse, closed blocks kept, linear lexing", () => {
    const answer = Array.from({ length: 40 }, (_, i) => `Пункт ${i}: **важно** и \`код\`.\n\n- a${i}\n- b${i}\n\n`).join("") + "| x | y |\n|---|---|\n| 1 | 2 |\n";
    const stream = new MarkdownStream();
    let shown = stream.update("");
    let firstBlock: unknown = null;
    for (let i = 0; i < answer.length; i += 7) {
      shown = stream.update(answer.slice(0, i + 7));
      if (i > answer.length / 2 && !firstBlock) firstBlock = shown[0];
    }
    expect(shown).toEqual(parseMarkdown(answer));
    expect(stream.update(answer)[0]).toBe(firstBlock); // a closed block is the same object
    // Re-parsing the whole answer per update would lex ~answer²/14 characters (7 per update).
    const whole = answer.length ** 2 / 14;
    expect(stream.lexed).toBeLessThan(answer.length * 20);
    expect(stream.lexed * 3).toBeLessThan(whole);
  });

  it("a final text that is not an extension of what streamed is parsed again", () => {
    const s = new MarkdownStream();
    s.update("- a\n- b\n\nfirst\n\nsecond\n\nthird");
    expect(s.update("entirely new")).toEqual([{ k: "p", c: [{ k: "text", text: "entirely new" }] }]);
  });
});

const h = useModel();

const first = (f: { submits: { messages: StreamMessage[] }[] }, n: number): StreamMessage[] => {
  const out: StreamMessage[] = [];
  let data = 0;
  for (const m of f.submits[0]!.messages) {
    if (m.type === "data" && ++data > n) break;
    out.push(m);
  }
  return out;
};

describe("a stream that knows when it is dead", () => {
  it("streaming, silent for 2 heartbeats ──→ disconnected, never cancelled; reconnect joins from the last seq", async () => {
    const f = await fixture("join");
    h.transport.queue({ messages: first(f, 3), hang: true }, { messages: f.submits[1]!.messages });
    await h.started({ heartbeatS: 2 });
    h.model.send("привет and echo 80 words");
    await settle(3000);
    expect(h.model.state).toBe("streaming"); // 3 s < 2 × 2 s
    await settle(2000);
    expect(h.model.state).toBe("disconnected");
    expect(h.transport.cancelled).toBe(0); // the run goes on server-side
    await settle(6000);
    expect(h.transport.payloads[1]).toMatchObject({ action: "join", message: { last_seq: 3, tab_id: "tab-1" } });
    expect(h.model.state).toBe("idle");
  });

  it("heartbeats keep a silent stream alive and show nothing", async () => {
    const f = await fixture("join");
    h.transport.queue({ messages: first(f, 3), hang: true, beatMs: 1000 });
    await h.started({ heartbeatS: 2 });
    h.model.send("привет and echo 80 words");
    await settle(2000);
    const shown = JSON.stringify(h.model.items);
    await settle(20_000);
    expect(h.model.state).toBe("streaming");
    expect(JSON.stringify(h.model.items)).toBe(shown);
  });

  it("heartbeatS 0: no watchdog", async () => {
    const f = await fixture("join");
    h.transport.queue({ messages: first(f, 3), hang: true });
    await h.started({ heartbeatS: 0 });
    h.model.send("привет");
    await settle(60_000);
    expect(h.model.state).toBe("streaming");
  });
});

describe("Stop on a joined run", () => {
  it("a reloaded tab following its run stops it by run_id (REST cancel), partial kept", async () => {
    const f = await fixture("join");
    h.rest.activeAnswer = { active: false, until: null, run: { run_id: "r-1", status: "running", last_seq: 2 } };
    h.transport.queue({ messages: first(f, 2), hang: true });
    await h.started();
    await h.model.openConversation("c-1");
    await settle();
    expect(h.model.state).toBe("streaming");
    h.model.stop();
    await settle();
    const runId = String((f.submits[0]!.messages.find((m) => m.type === "data") as { data: { metadata: { run_id: string } }[] }).data[0]!.metadata.run_id);
    expect(h.rest.calls).toContain(`cancel c-1 ${runId} tab-1`);
    expect(h.model.state).toBe("idle");
    expect((h.model.items.at(-1) as AssistantItem).partial).toBe(true);
  });

  it("a refused cancel (another tab's run) is said", async () => {
    const f = await fixture("join");
    h.rest.activeAnswer = { active: false, until: null, run: { run_id: "r-1", status: "running", last_seq: 2 } };
    h.rest.cancelAnswer = () => { throw new RestError(409, "CONVERSATION_BUSY", "another tab started this run; stop it there"); };
    h.transport.queue({ messages: first(f, 2), hang: true });
    await h.started();
    await h.model.openConversation("c-1");
    await settle();
    h.model.stop();
    await settle();
    expect(h.model.state).toBe("error");
    expect(h.model.error).toMatchObject({ code: "CONVERSATION_BUSY", text: "another tab started this run; stop it there" });
  });
});

const msg = (i: number): HistoryMessage => ({
  id: `m${i}`, conversation_id: "c", turn_id: `t${i}`, role: i % 2 ? "assistant" : "user", content: `text ${i}`,
  partial: false, created_at: "", confirmations: [],
  tool_calls: i % 2 ? [{ call_id: `k${i}`, tool: "search_dashboards", title: "Поиск дашбордов", input: {}, output: null, outcome: "ok", error: null, attempts: 1 }] : [],
});

describe("history", () => {
  it("pages back by cursor: older messages prepended in order, until none are left", async () => {
    const pages: Record<string, { items: HistoryMessage[]; next_cursor: string | null }> = {
      "": { items: [4, 5, 6, 7].map(msg), next_cursor: "p2" },
      p2: { items: [0, 1, 2, 3].map(msg), next_cursor: null },
    };
    h.rest.historyPage = async (cursor: string | null) => pages[cursor ?? ""]!;
    await h.started();
    await h.model.openConversation("c");
    expect(h.model.items.map((i) => i.id)).toEqual(["m4", "m5", "m6", "m7"]);
    expect(h.model.olderCursor).toBe("p2");
    await h.model.loadOlder();
    expect(h.model.items.map((i) => i.id)).toEqual(["m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"]);
    expect(h.model.olderCursor).toBeNull();
    expect(h.rest.calls.filter((c) => c.startsWith("history"))).toEqual(["history c", "history c p2"]);
  });

  it("a reloaded tool card has the title the stream showed, not the machine name", () => {
    const items = fromHistory([msg(1)], 0, 0);
    const tool = (items[0] as AssistantItem).parts[0] as ToolView;
    expect(tool.title).toBe("Поиск дашбордов");
    expect(tool.status).toBe("done");
  });
});

const conv = (i: number): Conversation => ({ id: `c${i}`, title: `Диалог ${i}`, created_at: "", last_activity_at: "", is_archived: false, archived_at: null });

describe("conversation list", () => {
  it("pages as it scrolls (keyset cursor), to the 120th; a search starts again", async () => {
    h.rest.list = async (cursor: string | null) => {
      const from = cursor ? Number(cursor) : 0;
      const items = Array.from({ length: Math.min(50, 120 - from) }, (_, i) => conv(from + i));
      return { items, next_cursor: from + 50 < 120 ? String(from + 50) : null };
    };
    const list = new ConversationsModel(h.rest);
    await list.load();
    expect(list.items).toHaveLength(50);
    expect(list.hasMore).toBe(true);
    await list.more();
    await list.more();
    expect(list.items).toHaveLength(120);
    expect(list.items.at(-1)!.id).toBe("c119");
    expect(list.hasMore).toBe(false);
    await list.more(); // nothing more to ask for
    expect(h.rest.calls.filter((c) => c.startsWith("list"))).toHaveLength(3);
    list.q = "отчёт";
    await list.load();
    expect(h.rest.calls.at(-1)).toBe("list отчёт");
    expect(list.items).toHaveLength(50);
  });

  it("rename: the new title at once; a refusal keeps the old one and says why", async () => {
    h.rest.list = { items: [conv(1)], next_cursor: null };
    const list = new ConversationsModel(h.rest);
    await list.load();
    expect(await list.rename(list.items[0]!, "  Отчёт по энергии  ")).toBe(true);
    expect(h.rest.calls.at(-1)).toBe("rename c1 Отчёт по энергии");
    expect(list.items[0]!.title).toBe("Отчёт по энергии");
    h.rest.renameAnswer = () => { throw new RestError(422, "INVALID_REQUEST", "title: too long"); };
    expect(await list.rename(list.items[0]!, "x".repeat(300))).toBe(false);
    expect(list.renameError).toBe("title: too long");
    expect(list.items[0]!.title).toBe("Отчёт по энергии");
  });
});

describe("attachments", () => {
  const file = (name: string, size: number) => new File([new Uint8Array(size)], name, { type: "text/plain" });
  const fd = (f: File): FileData => ({ path: `/tmp/gradio/${f.name}`, orig_name: f.name, size: f.size, mime_type: f.type, meta: { _type: "gradio.FileData" } });

  it("limits refuse before anything is sent, each with its reason", () => {
    const uploads: string[] = [];
    const a = new AttachmentsModel(async (f) => { uploads.push(f.name); return fd(f); }, WORDS.ru, { maxFiles: 2, maxFileBytes: 100, maxTotalBytes: 150 });
    expect(a.limitsText).toBe("До 2 файлов, до 100 Б каждый, 150 Б вместе");
    a.add([file("big.txt", 101), file("a.txt", 90), file("b.txt", 90), file("c.txt", 10), file("d.txt", 10)]);
    expect(a.items.map((x) => [x.name, x.status, x.reason])).toEqual([
      ["big.txt", "refused", "файл больше 100 Б"],
      ["a.txt", "uploading", null],
      ["b.txt", "refused", "все файлы вместе больше 150 Б"],
      ["c.txt", "uploading", null],
      ["d.txt", "refused", "не больше 2 файлов в сообщении"],
    ]);
    expect(uploads).toEqual(["a.txt", "c.txt"]);
  });

  it("progress, then the file goes with the message; the server's refusal is shown", async () => {
    let finish: (() => void) | null = null;
    const upload = (f: File, progress: (p: number) => void) => new Promise<FileData>((ok, no) => {
      if (f.name === "bad.bin") { no(new RestError(413, "INVALID_REQUEST", "over your upload quota")); return; }
      progress(0.5);
      finish = () => ok(fd(f));
    });
    const f = await fixture("happy");
    h.transport.queue({ messages: f.submits[0]!.messages });
    await h.started({ upload });
    h.model.files.add([file("note.txt", 10), file("bad.bin", 10)]);
    await settle();
    expect(h.model.files.items.map((x) => [x.status, x.progress, x.reason])).toEqual([
      ["uploading", 50, null], ["refused", 0, "over your upload quota"]]);
    h.model.send("прочитай файл");
    expect(h.transport.payloads).toHaveLength(0); // not while a file uploads
    finish!();
    await settle();
    h.model.send("прочитай файл");
    await settle();
    expect(h.transport.payloads[0]!.message.files).toEqual([fd(file("note.txt", 10))]);
    expect(h.model.files.items).toEqual([]);
    expect(h.model.items[0]).toMatchObject({ kind: "user", text: "прочитай файл", files: ["note.txt"] });
  });
});

describe("words", () => {
  it("the card's risk level in the user's language", () => {
    expect(WORDS.ru.level("guarded")).toBe("Уровень: с осторожностью");
    expect(WORDS.ru.level("dangerous")).toBe("Уровень: опасно");
    expect(WORDS.ru.level("safe")).toBe("Уровень: безопасно");
    expect(WORDS.en.level("guarded")).toBe("Level: guarded");
    expect(WORDS.en.risk("destructive")).toBe("Risk: irreversible");
  });
});
