// The @gradio/client adapter: a connect the model gave up on (deadline) that answers late must
// not replace, and close, the newer client a join is streaming on. The client is replaced by a
// double here only to hold its connects open; the real one is exercised by the recorded
// fixtures and the browser tests.
import { describe, expect, it, vi } from "vitest";

const pending: { resolve: (c: unknown) => void; client: { closed: boolean; config: unknown; close(): void; submit: () => unknown } }[] = [];
vi.mock("@gradio/client", () => ({
  Client: {
    connect: () => new Promise((resolve) => {
      const client = { closed: false, config: { components: [] }, close() { this.closed = true; },
                       submit: () => ({ [Symbol.asyncIterator]: () => ({ next: async () => ({ done: true }) }), cancel: () => undefined }) };
      pending.push({ resolve: () => resolve(client), client });
    }),
  },
}));

const { createGradioTransport } = await import("../src/lib/model/transport.js");

describe("createGradioTransport", () => {
  it("a late connect is closed and refused; the newer client stays", async () => {
    const t = createGradioTransport({ gradioUrl: "http://h/api/agent/gradio", getToken: async () => null });
    const first = t.connect();
    await vi.waitFor(() => expect(pending).toHaveLength(1));
    const second = t.connect();
    await vi.waitFor(() => expect(pending).toHaveLength(2));
    pending[1]!.resolve(null);
    await second;
    pending[0]!.resolve(null);
    await expect(first).rejects.toThrow(/superseded/);
    expect(pending[0]!.client.closed).toBe(true);
    expect(pending[1]!.client.closed).toBe(false);
  });
});
