/** The model under vitest's fake clock, with the fake transport and REST (fake.ts): fresh per
 * test, disposed after it. */

import { afterEach, beforeEach, vi } from "vitest";
import { ChatModel, type ModelOptions } from "../src/lib/model/chat.svelte.js";
import { FakeRest, FakeTransport } from "./fake.js";

/** Let the model's promises and timers run: `ms` of the fake clock, in steps. */
export const settle = async (ms = 0): Promise<void> => {
  for (let i = 0; i < 20; i++) await vi.advanceTimersByTimeAsync(ms ? ms / 20 : 0);
};

export interface Harness {
  transport: FakeTransport;
  rest: FakeRest;
  model: ChatModel;
  /** A started model (connected, idle) with these options. */
  started(opts?: Partial<ModelOptions>): Promise<ChatModel>;
}

export function useModel(): Harness {
  const h = {} as Harness;
  h.started = async (opts = {}) => {
    h.model = new ChatModel({ transport: h.transport, rest: h.rest, tabId: "tab-1", lang: "ru", ...opts });
    await h.model.start();
    await settle();
    return h.model;
  };
  beforeEach(() => {
    vi.useFakeTimers();
    vi.setSystemTime(new Date("2026-12-01T15:24:00Z"));
    h.transport = new FakeTransport();
    h.rest = new FakeRest();
  });
  afterEach(() => {
    h.model?.dispose();
    vi.useRealTimers();
  });
  return h;
}
