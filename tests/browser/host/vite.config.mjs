// Builds the host app against the packaged library (web/dist, `npm run package`). Run from a
// copy of this folder whose node_modules links to web/node_modules (tests/browser/test_panel.py
// lays it out), so svelte, the Svelte plugin and @gradio/client are web's own.
import { resolve } from "node:path";
import { svelte } from "@sveltejs/vite-plugin-svelte";
import { defineConfig } from "vite";

const WEB = process.env.WEB_DIR;
if (!WEB) throw new Error("WEB_DIR is not set (the web/ folder)");

export default defineConfig({
  base: "./",
  plugins: [svelte()],
  // The package by its name, resolved to the built library, as an installed dependency would be.
  resolve: { alias: { "@agentchat/panel": resolve(WEB, "dist", "index.js") } },
  build: { emptyOutDir: true, target: "es2022" },
});
