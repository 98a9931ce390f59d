// The web's import rules (imports.ts): `src/` has no cycle and no import its layer table forbids,
// and the checker itself sees the edges it is there to catch.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { check, readTree, renderLayers, specifiers } from "./imports.js";

const src = fileURLToPath(new URL("../src/", import.meta.url));

describe("src/ imports", () => {
  const found = check(readTree(src));

  it("has no cycle between modules, type-only imports included", () => {
    expect(found.cycles.map((c) => c.join(" → "))).toEqual([]);
  });

  it("follows the layer table", () => {
    expect(found.forbidden).toEqual([]);
    expect(found.unplaced).toEqual([]); // a new folder gets a row in LAYERS
    expect(found.unresolved).toEqual([]);
  });

  it("web/README.md shows the table the check reads", () => {
    const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
    const table = renderLayers();
    expect(readme.includes(table), `web/README.md's layer table should read:\n${table}`).toBe(true);
  });
});

describe("the checker", () => {
  const svelte = (script: string): string => `<script lang="ts">\n${script}\n</script>\n<p>{x}</p>`;

  it("reads every kind of import, in .ts and in a component's scripts", () => {
    const ts = [
      `import a from "./a.js";`, `import type { B } from "./b.js";`, `import { type C } from "./c.js";`,
      `export { d } from "./d.js";`, `export type * from "./e.js";`, `const f = await import("./f.js");`,
      `let g: import("./g.js").G;`, `import "./h.js";`,
    ].join("\n");
    expect(specifiers("x.ts", ts)).toEqual([
      { spec: "./a.js", typeOnly: false }, { spec: "./b.js", typeOnly: true }, { spec: "./c.js", typeOnly: true },
      { spec: "./d.js", typeOnly: false }, { spec: "./e.js", typeOnly: true }, { spec: "./f.js", typeOnly: false },
      { spec: "./g.js", typeOnly: true }, { spec: "./h.js", typeOnly: false },
    ]);
    const comp = `<script module lang="ts">export { m } from "./m.js";</script>\n${svelte(`import I from "./I.svelte";`)}`;
    expect(specifiers("X.svelte", comp).map((s) => s.spec)).toEqual(["./m.js", "./I.svelte"]);
  });

  it("finds a cycle made of type-only imports", () => {
    const files = new Map([
      ["lib/model/a.ts", `import type { B } from "./b.svelte.js"; export type A = B;`],
      ["lib/model/b.svelte.ts", `import { c } from "./c.js"; export type B = number; c();`],
      ["lib/model/c.ts", `export function c(): void { void import("./a.js"); }`],
      ["lib/model/d.ts", `import type { A } from "./a.js"; export type D = A;`],
    ]);
    expect(check(files).cycles).toEqual([["lib/model/a.ts", "lib/model/b.svelte.ts", "lib/model/c.ts", "lib/model/a.ts"]]);
  });

  it("finds an import the table forbids, an unknown file and a folder with no layer", () => {
    const files = new Map([
      ["lib/model/m.ts", `import type { Props } from "../components/Card.svelte"; import x from "./nope.js";`],
      ["lib/markdown/n.ts", `import { WORDS } from "../i18n.js";`],
      ["lib/components/Card.svelte", svelte(`import { m } from "../model/m.js";`)],
      ["lib/i18n.ts", ``],
      ["lib/extra/z.ts", ``],
    ]);
    const found = check(files);
    expect(found.forbidden).toEqual([
      "lib/model/m.ts (model) → lib/components/Card.svelte (components), type-only: model may import words",
      "lib/model/m.ts (model) → lib/components/Card.svelte (components), type-only: model imports no component",
      "lib/markdown/n.ts (markdown) → lib/i18n.ts (words): markdown may import nothing",
    ]);
    expect(found.unresolved).toEqual(["lib/model/m.ts → ./nope.js"]);
    expect(found.unplaced).toEqual(["lib/extra/z.ts"]);
    expect(found.cycles).toEqual([["lib/components/Card.svelte", "lib/model/m.ts", "lib/components/Card.svelte"]]);
  });
});
