/** Markdown (CommonMark + GFM tables, lists, code) as a small tree the panel renders with
 * elements, never as HTML: `marked`'s lexer parses; this module keeps only what the panel
 * shows. Raw HTML stays text; a link keeps only an absolute http(s) or mailto target (and its
 * host, shown beside it); an image becomes a link to it, never an <img> (the page's CSP is
 * `img-src 'self' data:`, and no answer makes the browser fetch another origin). */

import type { MarkedToken, Token, Tokens } from "marked";

export type Inline =
  | { k: "text"; text: string }
  | { k: "strong" | "em" | "del"; c: Inline[] }
  | { k: "code"; text: string }
  | { k: "br" }
  | { k: "link"; href: string; host: string; c: Inline[] };

export type Align = "center" | "left" | "right" | null;

export type Block =
  | { k: "p"; c: Inline[] }
  | { k: "h"; level: number; c: Inline[] }
  | { k: "code"; lang: string; text: string }
  | { k: "quote"; c: Block[] }
  | { k: "list"; ordered: boolean; start: number; items: { task: boolean; checked: boolean; c: Block[] }[] }
  | { k: "table"; align: Align[]; head: Inline[][]; rows: Inline[][][] }
  | { k: "hr" };

const SAFE = new Set(["http:", "https:", "mailto:"]);

/** An absolute http(s) or mailto URL and the host people see, or null (shown as text). */
export function safeLink(href: string): { href: string; host: string } | null {
  let url: URL;
  try {
    url = new URL(href.trim());
  } catch {
    return null; // relative, or not a URL: where it points depends on the page
  }
  if (!SAFE.has(url.protocol)) return null; // javascript:, data:, file:, …
  const host = url.protocol === "mailto:" ? url.pathname.split("@").pop() ?? "" : url.host;
  return { href: url.href, host };
}

export function inlines(tokens: Token[] | undefined): Inline[] {
  const out: Inline[] = [];
  for (const raw of tokens ?? []) {
    const t = raw as MarkedToken;
    switch (t.type) {
      case "strong":
      case "em":
      case "del":
        out.push({ k: t.type, c: inlines(t.tokens) });
        break;
      case "codespan":
        out.push({ k: "code", text: t.text });
        break;
      case "br":
        out.push({ k: "br" });
        break;
      case "link": {
        const safe = safeLink(t.href);
        const c = inlines(t.tokens);
        if (safe) out.push({ k: "link", ...safe, c });
        else out.push(...c);
        break;
      }
      case "image": {
        const safe = safeLink(t.href);
        const label: Inline = { k: "text", text: `🖼 ${t.text || t.href}` };
        out.push(safe ? { k: "link", ...safe, c: [label] } : label);
        break;
      }
      case "text":
        if (t.tokens?.length) out.push(...inlines(t.tokens));
        else out.push({ k: "text", text: t.text });
        break;
      case "escape":
        out.push({ k: "text", text: t.text });
        break;
      case "html":
        out.push({ k: "text", text: t.raw }); // shown as written, never parsed
        break;
      case "checkbox":
        break; // a task item's box: the list item carries it
      default:
        out.push({ k: "text", text: raw.raw ?? "" });
    }
  }
  return out;
}

function cells(row: Tokens.TableCell[]): Inline[][] {
  return row.map((cell) => inlines(cell.tokens));
}

export function blocks(tokens: Token[]): Block[] {
  const out: Block[] = [];
  for (const raw of tokens) {
    const b = block(raw);
    if (b) out.push(b);
  }
  return out;
}

export function block(raw: Token): Block | null {
  const t = raw as MarkedToken;
  switch (t.type) {
    case "paragraph":
      return { k: "p", c: inlines(t.tokens) };
    case "heading":
      return { k: "h", level: Math.min(6, Math.max(1, t.depth)), c: inlines(t.tokens) };
    case "code":
      return { k: "code", lang: (t.lang ?? "").split(/\s/)[0] ?? "", text: t.text };
    case "blockquote":
      return { k: "quote", c: blocks(t.tokens) };
    case "list":
      return {
        k: "list", ordered: t.ordered, start: typeof t.start === "number" ? t.start : 1,
        items: t.items.map((it) => ({ task: it.task, checked: it.checked === true, c: blocks(it.tokens) })),
      };
    case "table":
      return { k: "table", align: t.align, head: cells(t.header), rows: t.rows.map(cells) };
    case "hr":
      return { k: "hr" };
    case "text": // a tight list item's text
      return { k: "p", c: t.tokens?.length ? inlines(t.tokens) : [{ k: "text", text: t.text }] };
    case "html":
      return { k: "p", c: [{ k: "text", text: t.raw.trim() }] };
    case "space":
    case "def":
      return null;
    default:
      return raw.raw?.trim() ? { k: "p", c: [{ k: "text", text: raw.raw }] } : null;
  }
}
