/** Incremental Markdown for a streaming answer. At 30 tokens/s re-parsing the whole answer per
 * token costs its square; here a top-level block is parsed once it is closed (two blocks
 * follow it), and only the open tail is lexed again as text arrives. A closed block keeps its
 * object, so the view (keyed by it) leaves its elements alone. Text that is not an extension
 * of the last (a final answer that differs) is parsed again from the start. Nesting is
 * clamped before lexing (clamp.ts); should the lexer or the tree still fail, the text is shown
 * as written, in one paragraph. */

import { Lexer, type Token } from "marked";
import { DepthTokenizer, clampNesting } from "./clamp.js";
import { block, type Block } from "./nodes.js";

const OPEN = 2; // blocks kept open: a list or a quote may still take the next lines

export class MarkdownStream {
  #text = "";
  #closed: Block[] = [];
  #closedEnd = 0; // characters of #text the closed blocks came from
  /** How many characters were lexed in all (the benchmark's and the tests' measure). */
  lexed = 0;

  update(text: string): Block[] {
    try {
      return this.#update(text);
    } catch {
      // A RangeError or anything else: the next update starts again from nothing.
      this.#text = "";
      this.#closed = [];
      this.#closedEnd = 0;
      return [{ k: "p", c: [{ k: "text", text }] }];
    }
  }

  #update(text: string): Block[] {
    const src = clampNesting(text.replace(/\r\n?/g, "\n"));
    if (!src.startsWith(this.#text)) {
      this.#closed = [];
      this.#closedEnd = 0;
    }
    this.#text = src;
    const tail = src.slice(this.#closedEnd);
    this.lexed += tail.length;
    const tokens: Token[] = new Lexer({ gfm: true, tokenizer: new DepthTokenizer() }).lex(tail);
    const open: Block[] = [];
    let pos = this.#closedEnd;
    let closing = true;
    tokens.forEach((t, i) => {
      const raw = t.raw ?? "";
      // A block closes only where its source is exactly the text's (else: keep lexing it).
      closing &&= i < tokens.length - OPEN && src.startsWith(raw, pos);
      const b = block(t);
      if (closing) {
        pos += raw.length;
        if (b) this.#closed.push(b);
      } else if (b) {
        open.push(b);
      }
    });
    this.#closedEnd = pos;
    return [...this.#closed, ...open];
  }
}

/** A finished text (history): parsed once. */
export function parseMarkdown(text: string): Block[] {
  return new MarkdownStream().update(text);
}
