// The page: read config.json next to the page, then mount the panel.
import { mount } from "svelte";
import Page from "./Page.svelte";
import { loadConfig } from "./config.js";

const target = document.getElementById("app")!;
const base = new URL(".", location.href);
loadConfig(base)
  .then((config) => mount(Page, { target, props: { config, base } }))
  .catch((e: unknown) => {
    target.textContent = `AgentChat: ${e instanceof Error ? e.message : String(e)}`;
    target.setAttribute("role", "alert");
  });
