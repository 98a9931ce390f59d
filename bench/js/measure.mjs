// What both benchmark clients (client.mjs for the agent and the bare, langgraph.mjs for the
// peer) measure by, so every side is counted alike: the expected text's token boundaries, and
// the first-token marks bench/agent_scale.py --profile-start reads from stderr.
const TOKEN_RE = /\S+\s*|\s+/g;

// A prefix length -> how many tokens it holds.
export function boundaries(text) {
  const out = new Map([[0, 0]]);
  let len = 0;
  let i = 0;
  for (const m of text.matchAll(TOKEN_RE)) {
    len += m[0].length;
    out.set(len, ++i);
  }
  return out;
}

export const mark = (what) => process.stderr.write(`BENCH-MARK ${what}\n`);

// spec.mark_first: `submit` just before the first round's submits, then `half-first` and
// `all-first` once half and all of its streams have their first text (ms since the submits).
export function firstMarks(spec) {
  let firsts = 0;
  let submitted = 0;
  return {
    submit() {
      mark("submit");
      submitted = performance.now();
    },
    firstSeen() {
      if (!spec.mark_first) return;
      firsts++;
      const t = Math.round(performance.now() - submitted);
      if (firsts === Math.ceil(spec.n / 2)) mark(`half-first ${t}`);
      if (firsts === spec.n) mark(`all-first ${t}`);
    },
  };
}
