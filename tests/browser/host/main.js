// A minimal host app, as the ss-tools frontend would embed the panel: it owns login (here the
// test hands it a token) and imports the package by its name.
import { mount } from "svelte";
import { AgentChatPanel } from "@agentchat/panel";

const token = window.__HOST_TOKEN ?? null;
mount(AgentChatPanel, {
  target: document.getElementById("panel"),
  // Absolute, as the page passes it: @gradio/client connects only to an absolute URL.
  props: { baseUrl: new URL("/api/agent", location.href).href, getToken: async () => token,
           lang: "ru" },
});
