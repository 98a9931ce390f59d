// The page routes by its own path: chat at the root, the approvals inbox, one approval and one
// MCP call below it, under whatever prefix a proxy gives the page.
import { describe, expect, it } from "vitest";
import { href, route } from "../src/page/route.js";

describe("route", () => {
  it("finds the view and the page's root under any prefix", () => {
    expect(route("https://h/api/agent/ui/")).toEqual({ root: new URL("https://h/api/agent/ui/"), view: { kind: "chat" } });
    const inbox = route("https://h/p/api/agent/ui/approvals/?status=expired");
    expect(inbox.root.href).toBe("https://h/p/api/agent/ui/");
    expect(inbox.view).toEqual({ kind: "inbox", status: "expired" });
    expect(route("https://h/api/agent/ui/approvals/?status=nope").view).toEqual({ kind: "inbox", status: "pending" });
    const one = route("https://h/api/agent/ui/approvals/3f2a-9c");
    expect(one.root.href).toBe("https://h/api/agent/ui/");
    expect(one.view).toEqual({ kind: "approval", id: "3f2a-9c" });
    const id = "mcp-0b6f2a44-7c1e-4a53-9a7e-1d2f3c4b5a69";
    const call = route(`https://h/p/api/agent/ui/calls/${id}`);
    expect(call.root.href).toBe("https://h/p/api/agent/ui/");
    expect(call.view).toEqual({ kind: "call", id });
    // Not a call id: the chat page, never a call view of attacker-chosen text.
    expect(route("https://h/api/agent/ui/calls/..%2Fx").view).toEqual({ kind: "chat" });
  });

  it("writes the views' URLs back", () => {
    const root = new URL("https://h/api/agent/ui/");
    expect(href(root, { kind: "approval", id: "ab-1" })).toBe("https://h/api/agent/ui/approvals/ab-1");
    expect(href(root, { kind: "inbox", status: "pending" })).toBe("https://h/api/agent/ui/approvals/");
    expect(href(root, { kind: "inbox", status: "answered" })).toBe("https://h/api/agent/ui/approvals/?status=answered");
    expect(href(root, { kind: "chat" })).toBe(root.href);
    expect(href(root, { kind: "call", id: "mcp-1" })).toBe("https://h/api/agent/ui/calls/mcp-1");
  });
});
