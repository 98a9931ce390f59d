// What both benchmark clients (client.mjs for the agent and the bare, langgraph.mjs for the
// peer) count tokens by: the expected text's token boundaries, a prefix length -> how many
// tokens it holds, so every side's first token and gaps are measured alike.
const TOKEN_RE = /\S+\s*|\s+/g;

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
