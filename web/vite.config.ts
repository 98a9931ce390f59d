import { svelte } from "@sveltejs/vite-plugin-svelte";
import { defineConfig } from "vitest/config";

// base "./": the page is served under /api/agent/ui/ (or any prefix), so its assets are relative.
export default defineConfig({
  base: "./",
  plugins: [svelte()],
  // Tests run the model with Svelte's client runtime (real $state proxies), as a browser would.
  resolve: process.env.VITEST ? { conditions: ["browser"] } : undefined,
  build: { outDir: "build", emptyOutDir: true, target: "es2022" },
  test: {
    include: ["src/**/*.test.ts", "tests/**/*.test.ts"],
    environment: "node",
    testTimeout: 10_000,
  },
});
