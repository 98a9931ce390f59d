// The page: read config.json at the page's root, then mount the view its path names: the chat
// panel, the approvals inbox or one approval (docs/protocol.md §11), or one MCP call (§12). The
// approvals views and the call page are chunks of their own, loaded only there: the chat page's
// bytes stay the panel's (web/README.md, "Measured").
import { mount } from "svelte";
import Page from "./Page.svelte";
import { loadConfig } from "./config.js";
import { route } from "./route.js";

const target = document.getElementById("app")!;
const { root: base, view } = route(location.href);
loadConfig(base)
  .then(async (config) => {
    if (view.kind === "chat") return mount(Page, { target, props: { config, base } });
    if (view.kind === "call") {
      const { default: CallPage } = await import("./calls/CallPage.svelte");
      return mount(CallPage, { target, props: { config, base, id: view.id } });
    }
    const { default: Approvals } = await import("./approvals/Approvals.svelte");
    return mount(Approvals, { target, props: { config, base, view } });
  })
  .catch((e: unknown) => {
    target.textContent = `AgentChat: ${e instanceof Error ? e.message : String(e)}`;
    target.setAttribute("role", "alert");
  });
