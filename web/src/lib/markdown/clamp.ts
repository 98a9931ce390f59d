/** Nesting clamped before `marked` lexes: its lexer recurses once per container (a quote, a list
 * item) with no cap, so about 2 KB of `>` overflow the stack (`RangeError`) and 400 list levels
 * indented one under the other take 0.7-0.8 s per lex (2026-12, this 2-core machine), again on
 * every streamed update. Each line's container prefix keeps at most MAX_DEPTH markers (`>`,
 * a bullet, an ordered number) and MAX_INDENT columns of indentation (the space that ends a
 * marker aside); the rest of the prefix is dropped and the line's text kept. A container opens
 * only at a marker and each level takes a marker or two columns of indentation, so the lexer
 * nests at most MAX_DEPTH from markers plus MAX_DEPTH from indentation (tests/markdown.test.ts
 * checks it on generated text); nodes.ts cuts the tree it keeps at MAX_DEPTH. A line without
 * a marker (code, a paragraph's continuation) cannot open a container and is left as written.
 * Clamped (node, warm): 400 levels (161 KB) parse in 40-55 ms, 2,000 `>` and 4,000 `- ` in
 * under 6 ms. Emphasis nests inside a line, so DepthTokenizer caps it while lexing instead. */

import { Tokenizer, type Tokens } from "marked";

/** The deepest quote, list or emphasis the panel renders. */
export const MAX_DEPTH = 20;
/** Whitespace columns kept in a prefix that holds a marker: MAX_DEPTH levels of `- ` items. */
export const MAX_INDENT = 2 * MAX_DEPTH;

const TAB = 4; // a tab advances up to 4 columns: counted as 4, so the bound above holds

/** The length of a container marker at `i` (`>`, `-`/`+`/`*` or 1–9 digits and `.`/`)`
 * followed by whitespace or the line's end, as CommonMark and `marked` read them), or 0. */
function marker(line: string, i: number): number {
  const c = line[i];
  if (c === ">") return 1;
  let end = i;
  if (c === "-" || c === "+" || c === "*") {
    end = i + 1;
  } else {
    while (end < line.length && end - i < 10 && line[end]! >= "0" && line[end]! <= "9") end++;
    if (end === i || end - i > 9 || (line[end] !== "." && line[end] !== ")")) return 0;
    end++;
  }
  const next = line[end];
  return next === undefined || next === " " || next === "\t" ? end - i : 0;
}

/** One line with its container prefix clamped; the same string when nothing is over. */
export function clampLine(line: string): string {
  let kept = "";
  let markers = 0;
  let columns = 0;
  let over = false;
  let afterMarker = false;
  let i = 0;
  while (i < line.length) {
    const c = line[i]!;
    if (c === " " || c === "\t") {
      // The space after a marker is part of it (`-a` is text): kept, and not indentation.
      const w = afterMarker ? 0 : c === "\t" ? TAB : 1;
      afterMarker = false;
      if (columns + w > MAX_INDENT) over = true;
      else {
        columns += w;
        kept += c;
      }
      i++;
      continue;
    }
    const m = marker(line, i);
    if (m === 0) break;
    if (markers === MAX_DEPTH) {
      // Deeper than the cap: the rest of the prefix goes; the text after it stays.
      over = true;
      while (i < line.length) {
        const d = line[i] === " " || line[i] === "\t" ? 1 : marker(line, i);
        if (d === 0) break;
        i += d;
      }
      break;
    }
    markers++;
    kept += line.slice(i, i + m);
    i += m;
    afterMarker = true;
  }
  return over && markers > 0 ? kept + line.slice(i) : line;
}

/** The text with every line's nesting clamped (lines split on `\n`: the caller normalizes
 * `\r\n` and `\r` first, as `marked` does). */
export function clampNesting(text: string): string {
  let out = "";
  let start = 0;
  let changed = false;
  while (start <= text.length) {
    let end = text.indexOf("\n", start);
    if (end < 0) end = text.length;
    const line = text.slice(start, end);
    const clamped = clampLine(line);
    if (clamped !== line) changed = true;
    out += clamped + (end < text.length ? "\n" : "");
    start = end + 1;
  }
  return changed ? out : text;
}

/** `marked`'s tokenizer with emphasis (`*`, `_`, `~~`) nested at most MAX_DEPTH deep: deeper
 * delimiters stay text. Unbounded, `*a ` 1,000 times lexes in 0.55 s and 3,000 times throws
 * `RangeError` after 3 s; capped, 82 ms. One per lex: the depth is this lex's. */
export class DepthTokenizer extends Tokenizer {
  #depth = 0;

  override emStrong(src: string, maskedSrc: string, prevChar?: string): Tokens.Em | Tokens.Strong | undefined {
    return this.#nested(() => super.emStrong(src, maskedSrc, prevChar));
  }

  override del(src: string, maskedSrc: string, prevChar?: string): Tokens.Del | undefined {
    return this.#nested(() => super.del(src, maskedSrc, prevChar));
  }

  // The tokenizer lexes an emphasis's content before it returns: the depth is the call depth.
  #nested<T>(tokenize: () => T | undefined): T | undefined {
    if (this.#depth >= MAX_DEPTH) return undefined;
    this.#depth++;
    try {
      return tokenize();
    } finally {
      this.#depth--;
    }
  }
}
