/** The web's import graph and its rules: which layer of `src/` may import which (`LAYERS`), and
 * no cycle between modules. Every edge counts: `import`, `import type`, `export … from`,
 * `import()` and `import("…").T`, in `.ts` files and in the `<script>` blocks of `.svelte` files,
 * read with the TypeScript compiler's parser (never a regex over the code itself).
 *
 *   files ─▶ edgesOf() (relative specifiers resolved to files) ─▶ check(): forbidden edges,
 *            cycles (Tarjan's strongly connected components), unresolved imports, unplaced files
 */

import { readdirSync, readFileSync } from "node:fs";
import { join, posix, relative } from "node:path";
import ts from "typescript";

export interface Layer {
  name: string;
  /** The files of the layer: a folder (ending in "/") or single files, relative to `src/`. */
  paths: string[];
  /** The other layers it may import from (its own is always allowed; cycles are caught apart). */
  may: string[];
  /** False: it imports no `.svelte` component (a `.svelte.ts` runes module is plain code). */
  components?: boolean;
}

/** Lowest first. The model and the Markdown renderer are plain code the components draw. */
export const LAYERS: Layer[] = [
  { name: "words", paths: ["lib/i18n.ts"], may: [], components: false },
  { name: "urls", paths: ["lib/urls.ts"], may: [], components: false },
  { name: "markdown", paths: ["lib/markdown/"], may: [], components: false },
  { name: "model", paths: ["lib/model/"], may: ["words"], components: false },
  { name: "components", paths: ["lib/components/"], may: ["words", "markdown", "model"] },
  { name: "panel", paths: ["lib/AgentChatPanel.svelte", "lib/index.ts"], may: ["words", "urls", "markdown", "model", "components"] },
  { name: "page", paths: ["page/"], may: ["words", "urls", "markdown", "model", "components", "panel"] },
];

export interface Edge {
  from: string;
  to: string;
  spec: string;
  typeOnly: boolean;
}

export interface Findings {
  forbidden: string[];
  cycles: string[][];
  unresolved: string[];
  unplaced: string[];
}

/** Every `.ts` and `.svelte` file under `dir`, by its path relative to it (posix). */
export function readTree(dir: string): Map<string, string> {
  const files = new Map<string, string>();
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.(ts|svelte)$/.test(e.name)) files.set(relative(dir, p).split("\\").join("/"), readFileSync(p, "utf8"));
    }
  };
  walk(dir);
  return files;
}

/** The code a file holds: a `.ts` file whole, a `.svelte` file's `<script>` blocks (instance and
 * module; Svelte allows no `</script>` inside one, so the block's end is unambiguous). */
function scripts(path: string, source: string): string[] {
  if (!path.endsWith(".svelte")) return [source];
  return [...source.matchAll(/<script\b[^>]*>([\s\S]*?)<\/script>/g)].map((m) => m[1] ?? "");
}

/** The module specifiers one file imports, each with whether it is only a type. */
export function specifiers(path: string, source: string): { spec: string; typeOnly: boolean }[] {
  const found: { spec: string; typeOnly: boolean }[] = [];
  for (const code of scripts(path, source)) {
    const sf = ts.createSourceFile(`${path}.ts`, code, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
    const visit = (node: ts.Node): void => {
      if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
        const clause = node.importClause;
        const named = clause?.namedBindings && ts.isNamedImports(clause.namedBindings) ? clause.namedBindings.elements : [];
        const typeOnly = !!clause && (clause.isTypeOnly || !clause.name && named.length > 0 && named.every((e) => e.isTypeOnly));
        found.push({ spec: node.moduleSpecifier.text, typeOnly });
      } else if (ts.isExportDeclaration(node) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
        found.push({ spec: node.moduleSpecifier.text, typeOnly: node.isTypeOnly });
      } else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)
                 && ts.isStringLiteral(node.moduleReference.expression)) {
        found.push({ spec: node.moduleReference.expression.text, typeOnly: node.isTypeOnly });
      } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
        const arg = node.arguments[0];
        if (arg && ts.isStringLiteralLike(arg)) found.push({ spec: arg.text, typeOnly: false });
      } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)) {
        found.push({ spec: node.argument.literal.text, typeOnly: true });
      }
      ts.forEachChild(node, visit);
    };
    visit(sf);
  }
  return found;
}

/** A relative specifier as the bundler resolves it (`./x.js` is `x.ts`), or null. Packages
 * (bare specifiers) are not part of the graph. */
function resolve(from: string, spec: string, files: Map<string, string>): string | null {
  const base = posix.normalize(posix.join(posix.dirname(from), spec));
  const tries = spec.endsWith(".js") ? [`${base.slice(0, -3)}.ts`, base] : [base, `${base}.ts`, `${base}/index.ts`];
  return tries.find((p) => files.has(p)) ?? null;
}

const isRelative = (spec: string): boolean => spec.startsWith("./") || spec.startsWith("../");

export function layerOf(path: string, layers: Layer[] = LAYERS): Layer | null {
  return layers.find((l) => l.paths.some((p) => (p.endsWith("/") ? path.startsWith(p) : path === p))) ?? null;
}

/** The graph's cycles: each strongly connected component of more than one module (or a module
 * importing itself), as one closed path through it. */
export function cyclesOf(edges: Edge[]): string[][] {
  const next = new Map<string, string[]>();
  for (const e of edges) next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const sccs: string[][] = [];
  const strong = (v: string): void => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) {
        strong(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) === index.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || (next.get(v) ?? []).includes(v)) sccs.push(scc);
    }
  };
  for (const v of [...next.keys()].sort()) if (!index.has(v)) strong(v);
  // One closed path per component, for the message: breadth-first from its first module back to it.
  return sccs.map((scc) => {
    const inside = new Set(scc);
    const start = [...scc].sort()[0]!;
    const from = new Map<string, string>();
    const queue = [start];
    while (queue.length) {
      const v = queue.shift()!;
      for (const w of next.get(v) ?? []) {
        if (!inside.has(w)) continue;
        if (w === start) {
          const path = [start];
          for (let u = v; u !== start; u = from.get(u)!) path.splice(1, 0, u);
          return [...path, start];
        }
        if (!from.has(w)) {
          from.set(w, v);
          queue.push(w);
        }
      }
    }
    return [start, start];
  });
}

/** Every import of `files` (paths relative to `src/`) checked against `layers`. */
export function check(files: Map<string, string>, layers: Layer[] = LAYERS): Findings {
  const found: Findings = { forbidden: [], cycles: [], unresolved: [], unplaced: [] };
  const edges: Edge[] = [];
  for (const [path, source] of files) {
    if (!layerOf(path, layers)) found.unplaced.push(path);
    for (const { spec, typeOnly } of specifiers(path, source)) {
      if (!isRelative(spec)) continue;
      const to = resolve(path, spec, files);
      if (to === null) found.unresolved.push(`${path} → ${spec}`);
      else edges.push({ from: path, to, spec, typeOnly });
    }
  }
  for (const e of edges) {
    const a = layerOf(e.from, layers);
    const b = layerOf(e.to, layers);
    if (!a || !b) continue;
    const how = `${e.from} (${a.name}) → ${e.to} (${b.name})${e.typeOnly ? ", type-only" : ""}`;
    if (a !== b && !a.may.includes(b.name)) found.forbidden.push(`${how}: ${a.name} may import ${a.may.join(", ") || "nothing"}`);
    if (a.components === false && e.to.endsWith(".svelte")) found.forbidden.push(`${how}: ${a.name} imports no component`);
  }
  found.cycles = cyclesOf(edges);
  return found;
}

/** The table as web/README.md shows it. */
export function renderLayers(layers: Layer[] = LAYERS): string {
  const rows = layers.map((l) => {
    const may = l.may.length ? l.may.join(", ") : "nothing";
    return `| ${l.name} | ${l.paths.map((p) => `\`${p}\``).join(", ")} | ${may}${l.components === false ? "; no `.svelte` component" : ""} |`;
  });
  return ["| layer | files (under `src/`) | may import, besides itself |", "|---|---|---|", ...rows].join("\n");
}
