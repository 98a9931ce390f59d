// Hostile Markdown: nesting clamped before lexing and emphasis while lexing (clamp.ts), the
// clamp's properties checked with fast-check; the plain-text fallback and the component's
// boundary; mailto links that show every recipient and drop their headers.
import fc from "fast-check";
import { Lexer, type Token } from "marked";
import { render } from "svelte/server";
import { afterEach, describe, expect, it, vi } from "vitest";
import Markdown from "../src/lib/components/Markdown.svelte";
import { WORDS } from "../src/lib/i18n.js";
import { DepthTokenizer, MAX_DEPTH, MAX_INDENT, clampLine, clampNesting } from "../src/lib/markdown/clamp.js";
import { safeLink, type Block, type Inline } from "../src/lib/markdown/nodes.js";
import { MarkdownStream, parseMarkdown } from "../src/lib/markdown/stream.js";

afterEach(() => {
  vi.restoreAllMocks();
});

// The oracle: a line's container prefix as CommonMark reads it, measured apart from clamp.ts.
const PREFIX = /^(?:[ \t]|>|[-+*](?=[ \t]|$)|\d{1,9}[.)](?=[ \t]|$))*/;
function measure(line: string): { markers: number; columns: number; rest: string } {
  const prefix = PREFIX.exec(line)![0];
  const tokens = prefix.match(/[ \t]|>|[-+*]|\d{1,9}[.)]/g) ?? [];
  // Indentation: whitespace columns, less the one space or tab that ends each marker.
  const columns = tokens.reduce((n, t, i) => n + (t.trim() || tokens[i - 1]?.trim() ? 0 : t === "\t" ? 4 : 1), 0);
  return { markers: tokens.filter((t) => t.trim()).length, columns, rest: line.slice(prefix.length) };
}

/** Quotes and lists around the deepest block of the tree the panel renders. */
function depth(list: Block[]): number {
  let d = 0;
  for (const b of list) {
    if (b.k === "quote") d = Math.max(d, 1 + depth(b.c));
    if (b.k === "list") for (const it of b.items) d = Math.max(d, 1 + depth(it.c));
  }
  return d;
}

/** Quotes and list items around the deepest token `marked` made (its recursion depth). */
function lexDepth(tokens: Token[]): number {
  let d = 0;
  for (const t of tokens) {
    const own = t.type === "blockquote" || t.type === "list_item" ? 1 : 0;
    const inner = [...("tokens" in t && Array.isArray(t.tokens) ? t.tokens : []),
                   ...("items" in t && Array.isArray(t.items) ? (t.items as Token[]) : [])];
    d = Math.max(d, own + lexDepth(inner));
  }
  return d;
}

/** Emphasis around the deepest inline token `marked` made. */
function lexDepthInline(tokens: Token[]): number {
  let d = 0;
  for (const t of tokens) {
    const own = t.type === "em" || t.type === "strong" || t.type === "del" ? 1 : 0;
    d = Math.max(d, own + lexDepthInline("tokens" in t && Array.isArray(t.tokens) ? t.tokens : []));
  }
  return d;
}

function inlineDepth(list: Inline[]): number {
  let d = 0;
  for (const n of list) if ("c" in n) d = Math.max(d, 1 + inlineDepth(n.c));
  return d;
}

const texts = (list: Block[]): string => JSON.stringify(list).match(/"text":"[^"]*"/g)?.join(" ") ?? "";

// Lines of prefix pieces (many past the caps) and some text; documents of such lines, or of
// list items indented deeper line by line (nesting by indentation, under quotes or not).
const piece = fc.constantFrom(">", "> ", "- ", "* ", "+ ", "1. ", "12) ", " ", "  ", "    ", "\t");
const tail = fc.constantFrom("", "-", "a", "x y", "**b**", "`c`", "# h", "1234567890. z", "---", "-a", "*b*");
const line = fc.tuple(fc.array(piece, { maxLength: 120, size: "max" }), tail).map(([p, t]) => p.join("") + t);
const stairs = fc.tuple(fc.array(fc.nat({ max: 160 }), { maxLength: 80, size: "max" }), fc.constantFrom("", "> ", "> > "),
                        fc.constantFrom("- ", "1. ", "* "))
  .map(([ns, q, m]) => ns.sort((a, b) => a - b).map((n) => q + " ".repeat(n) + m + "x").join("\n"));
const doc = fc.oneof(fc.array(line, { maxLength: 30 }).map((l) => l.join("\n")), stairs);

describe("nesting clamped before lexing", () => {
  it("every line keeps at most MAX_DEPTH markers and MAX_INDENT columns, and its text", () => {
    fc.assert(fc.property(line, (l) => {
      const out = clampLine(l);
      const before = measure(l);
      const after = measure(out);
      if (before.markers === 0) return out === l; // no container opens: left as written
      expect(after.markers).toBeLessThanOrEqual(MAX_DEPTH);
      expect(after.columns).toBeLessThanOrEqual(MAX_INDENT);
      expect(after.rest).toBe(before.rest);
      if (before.markers <= MAX_DEPTH && before.columns <= MAX_INDENT) expect(out).toBe(l);
      return clampLine(out) === out;
    }), { numRuns: 2000 });
  });

  it("the lexer nests at most 2 x MAX_DEPTH and the tree at most MAX_DEPTH; same lines", () => {
    fc.assert(fc.property(doc, (text) => {
      const clamped = clampNesting(text);
      expect(clamped.split("\n").length).toBe(text.split("\n").length);
      expect(lexDepth(new Lexer({ gfm: true }).lex(clamped))).toBeLessThanOrEqual(2 * MAX_DEPTH);
      expect(depth(parseMarkdown(text))).toBeLessThanOrEqual(MAX_DEPTH);
    }), { numRuns: 300 });
  });

  it("streamed in pieces, clamped text ends in the same tree as one parse", () => {
    fc.assert(fc.property(doc, fc.integer({ min: 16, max: 400 }), (text, step) => {
      const s = new MarkdownStream();
      for (let i = step; i < text.length; i += step) s.update(text.slice(0, i));
      expect(s.update(text)).toEqual(parseMarkdown(text));
    }), { numRuns: 40 });
  });

  it("2,000 `>` are 20 quotes around the text", () => {
    const tree = parseMarkdown(">".repeat(2000) + " глубоко\n\nпосле");
    expect(depth(tree)).toBe(MAX_DEPTH);
    expect(texts(tree)).toContain("глубоко");
    expect(tree.at(-1)).toEqual({ k: "p", c: [{ k: "text", text: "после" }] });
  });

  it("4,000 list markers on a line and 400 indented levels are 20 lists around the text", () => {
    const markers = parseMarkdown("- ".repeat(4000) + "дно");
    expect(depth(markers)).toBe(MAX_DEPTH);
    expect(texts(markers)).toContain("дно");
    const indented = Array.from({ length: 400 }, (_, i) => `${"  ".repeat(i)}- уровень ${i}`).join("\n");
    expect(lexDepth(new Lexer({ gfm: true }).lex(clampNesting(indented)))).toBeLessThanOrEqual(2 * MAX_DEPTH);
    const tree = parseMarkdown(indented);
    expect(depth(tree)).toBe(MAX_DEPTH);
    expect(texts(tree)).toContain("уровень 399");
  });

  it("ordinary nesting is untouched: 5 levels of quotes and lists parse as before", () => {
    const text = "> a\n> > b\n> > > c\n\n- 1\n  - 2\n    1. 3\n       - 4\n         - 5";
    expect(clampNesting(text)).toBe(text);
    expect(depth(parseMarkdown(text))).toBe(5);
  });

  it("emphasis 3,000 deep (a RangeError unbounded) lexes MAX_DEPTH deep; the rest is text", () => {
    for (const [open, close] of [["*a ", " a*"], ["**a ", " a**"], ["~~a ", " a~~"], ["*a **b ~~c ", " c~~ b** a*"]]) {
      const text = open!.repeat(3000) + "центр" + close!.repeat(3000);
      expect(lexDepthInline(new Lexer({ gfm: true, tokenizer: new DepthTokenizer() }).lex(text)), open).toBe(MAX_DEPTH);
    }
    const tree = parseMarkdown("*a ".repeat(3000) + "центр" + " a*".repeat(3000));
    const p = tree[0] as Extract<Block, { k: "p" }>;
    expect(inlineDepth(p.c)).toBe(MAX_DEPTH); // elements, not the plain-text fallback
    expect(texts(tree)).toContain("центр");
  });
});

describe("a renderer error shows the text as written", () => {
  it("the lexer throws: one paragraph of the text; the next update parses again", () => {
    const s = new MarkdownStream();
    const lex = vi.spyOn(Lexer.prototype, "lex").mockImplementation(() => {
      throw new RangeError("Maximum call stack size exceeded");
    });
    expect(s.update("- a\n- b")).toEqual([{ k: "p", c: [{ k: "text", text: "- a\n- b" }] }]);
    lex.mockRestore();
    expect(s.update("- a\n- b\n- c")[0]!.k).toBe("list");
  });

  it("the component's boundary: the tree fails to build, the text is shown in a paragraph", () => {
    vi.spyOn(MarkdownStream.prototype, "update").mockImplementation(() => {
      throw new Error("broken tree");
    });
    // On the server a boundary rethrows unless told what to do with the error (the browser
    // renders `failed` as it is).
    const { body } = render(Markdown, { props: { text: "**жирный** <b>x</b>", words: WORDS.ru },
                                        transformError: (e: unknown) => e });
    expect(body).toContain("<p>**жирный** &lt;b>x&lt;/b></p>");
    expect(body).not.toContain("<strong>");
  });
});

describe("mailto links show every recipient and drop their headers", () => {
  const shown = (href: string): [string, string] | null => {
    const s = safeLink(href);
    return s && [s.href, s.shown];
  };

  it("several recipients, comma-separated or %-encoded, are all shown and kept", () => {
    expect(shown("mailto:a@evil.com,b@good.com")).toEqual(["mailto:a@evil.com,b@good.com", "a@evil.com, b@good.com"]);
    expect(shown("mailto:b@good.com%2Ca@evil.com")).toEqual(["mailto:b@good.com,a@evil.com", "b@good.com, a@evil.com"]);
    expect(shown("mailto:%61dmin%40good.com")).toEqual(["mailto:admin@good.com", "admin@good.com"]);
    expect(shown("mailto:a@b.org, ,c@d.org")).toEqual(["mailto:a@b.org,c@d.org", "a@b.org, c@d.org"]);
    expect(shown("mailto:info@почта.рф")).toEqual(["mailto:info@xn--80a1acny.xn--p1ai", "info@xn--80a1acny.xn--p1ai"]);
  });

  it("?cc=, &bcc=, subject and body never reach the href", () => {
    expect(shown("mailto:x@good.com?cc=evil@x")).toEqual(["mailto:x@good.com", "x@good.com"]);
    expect(shown("mailto:x@good.com?subject=hi&bcc=evil@x&body=y")).toEqual(["mailto:x@good.com", "x@good.com"]);
    expect(shown("mailto:x@good.com#frag")).toEqual(["mailto:x@good.com", "x@good.com"]);
    expect(safeLink("mailto:?to=evil@x")).toBeNull(); // every recipient in a header
    expect(safeLink("mailto:")).toBeNull();
  });

  it("an address with anything but plain characters makes the link text", () => {
    for (const href of [
      "mailto:x@good.com%3Fcc=evil@x", // a decoded `?`: the client would read a header
      "mailto:x%0A@good.com", "mailto:%22a,b%22@good.com", "mailto:a%E2%80%AEmoc.live@good.com",
      "mailto:a%20b@good.com", "mailto:good.com", "mailto:@good.com", "mailto:a@", "mailto:a@b/c",
      "mailto:a@[127.0.0.1]", "mailto:a@good.com%ZZ", "mailto:a@b@good.com",
    ]) expect(safeLink(href), href).toBeNull();
  });

  it("in an answer: the recipients beside the link, the headers gone", () => {
    const [p] = parseMarkdown("[поддержка](mailto:help@good.com,evil@x.org?cc=spy@x.org)");
    const link = (p as Extract<Block, { k: "p" }>).c[0] as Extract<Inline, { k: "link" }>;
    expect([link.href, link.shown]).toEqual(["mailto:help@good.com,evil@x.org", "help@good.com, evil@x.org"]);
  });
});
