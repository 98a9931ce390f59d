/** Markdown (CommonMark + GFM tables, lists, code) as a small tree the panel renders with
 * elements, never as HTML: `marked`'s lexer parses; this module keeps only what the panel
 * shows. Raw HTML stays text; a link keeps only an absolute http(s) or mailto target (and what
 * it points at, shown beside it: the host, or every recipient); an image becomes a link to it,
 * never an <img> (the page's CSP is `img-src 'self' data:`, and no answer makes the browser
 * fetch another origin). Quotes, lists and emphasis deeper than MAX_DEPTH are cut: their
 * content joins the level above (clamp.ts bounds what the lexer sees). */

import type { MarkedToken, Token, Tokens } from "marked";
import { MAX_DEPTH } from "./clamp.js";

export type Inline =
  | { k: "text"; text: string }
  | { k: "strong" | "em" | "del"; c: Inline[] }
  | { k: "code"; text: string }
  | { k: "br" }
  | { k: "link"; href: string; shown: string; c: Inline[] };

export type Align = "center" | "left" | "right" | null;

export type Block =
  | { k: "p"; c: Inline[] }
  | { k: "h"; level: number; c: Inline[] }
  | { k: "code"; lang: string; text: string }
  | { k: "quote"; c: Block[] }
  | { k: "list"; ordered: boolean; start: number; items: { task: boolean; checked: boolean; c: Block[] }[] }
  | { k: "table"; align: Align[]; head: Inline[][]; rows: Inline[][][] }
  | { k: "hr" };

/** An absolute http(s) or mailto URL and what people see beside it (the host; for mail, every
 * recipient), or null (shown as text). */
export function safeLink(href: string): { href: string; shown: string } | null {
  let url: URL;
  try {
    url = new URL(href.trim());
  } catch {
    return null; // relative, or not a URL: where it points depends on the page
  }
  if (url.protocol === "mailto:") return mailto(url);
  if (url.protocol !== "http:" && url.protocol !== "https:") return null; // javascript:, data:, file:, …
  return { href: url.href, shown: url.host };
}

// A recipient the panel shows: a plain local part, and a domain as a browser shows an http
// host (an IDN as punycode). Anything else (quotes, `%`, `?`, spaces, controls, bidi marks)
// makes the link text, so what is shown is all the mail client gets.
const LOCAL = /^[A-Za-z0-9._+-]+$/;
const DOMAIN = /^[\p{L}\p{N}.-]+$/u;

/** `mailto:` (RFC 6068): the recipients are the path, comma-separated and percent-encoded;
 * `?cc=`, `&bcc=`, `subject`, `body` (and `to=`) are headers the shown target would hide, so
 * the href keeps only the recipients it shows. */
function mailto(url: URL): { href: string; shown: string } | null {
  let path: string;
  try {
    path = decodeURIComponent(url.pathname);
  } catch {
    return null; // a broken escape
  }
  const recipients: string[] = [];
  for (const part of path.split(",")) {
    const addr = part.trim();
    if (!addr) continue;
    const at = addr.lastIndexOf("@");
    const local = addr.slice(0, at);
    const domain = addr.slice(at + 1);
    if (at <= 0 || !LOCAL.test(local) || !DOMAIN.test(domain)) return null;
    let host: string;
    try {
      host = new URL(`http://${domain}/`).hostname;
    } catch {
      return null;
    }
    if (!host) return null;
    recipients.push(`${local}@${host}`);
  }
  if (!recipients.length) return null; // `mailto:?to=…`: every recipient in a header
  return { href: `mailto:${recipients.join(",")}`, shown: recipients.join(", ") };
}

export function inlines(tokens: Token[] | undefined, depth = 0): Inline[] {
  const out: Inline[] = [];
  for (const raw of tokens ?? []) {
    const t = raw as MarkedToken;
    switch (t.type) {
      case "strong":
      case "em":
      case "del":
        if (depth >= MAX_DEPTH) out.push(...inlines(t.tokens, depth));
        else out.push({ k: t.type, c: inlines(t.tokens, depth + 1) });
        break;
      case "codespan":
        out.push({ k: "code", text: t.text });
        break;
      case "br":
        out.push({ k: "br" });
        break;
      case "link": {
        const safe = safeLink(t.href);
        const c = inlines(t.tokens, depth + 1);
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
        if (t.tokens?.length) out.push(...inlines(t.tokens, depth));
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

/** `depth`: the quotes and list items around these tokens. */
export function blocks(tokens: Token[], depth = 0): Block[] {
  const out: Block[] = [];
  for (const raw of tokens) {
    const t = raw as MarkedToken;
    if (depth >= MAX_DEPTH && t.type === "blockquote") {
      out.push(...blocks(t.tokens, depth)); // too deep: the quote's content joins this level
    } else if (depth >= MAX_DEPTH && t.type === "list") {
      for (const it of t.items) out.push(...blocks(it.tokens, depth));
    } else {
      const b = block(raw, depth);
      if (b) out.push(b);
    }
  }
  return out;
}

export function block(raw: Token, depth = 0): Block | null {
  const t = raw as MarkedToken;
  switch (t.type) {
    case "paragraph":
      return { k: "p", c: inlines(t.tokens) };
    case "heading":
      return { k: "h", level: Math.min(6, Math.max(1, t.depth)), c: inlines(t.tokens) };
    case "code":
      return { k: "code", lang: (t.lang ?? "").split(/\s/)[0] ?? "", text: t.text };
    case "blockquote":
      return { k: "quote", c: blocks(t.tokens, depth + 1) };
    case "list":
      return {
        k: "list", ordered: t.ordered, start: typeof t.start === "number" ? t.start : 1,
        items: t.items.map((it) => ({ task: it.task, checked: it.checked === true, c: blocks(it.tokens, depth + 1) })),
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
