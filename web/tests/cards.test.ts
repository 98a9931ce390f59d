// The card's `reason` (docs/protocol.md §3, "Untrusted context"): shown when the server says
// why an untrusted card is asked, absent otherwise.
import { describe, expect, it } from "vitest";
import { cardFrom } from "../src/lib/model/cards.js";

const base = { confirm_id: "c1", prompt: "Задеплоить?", permission_granted: true };

describe("cardFrom", () => {
  it("keeps the reason of an untrusted card", () => {
    const reason = "В разговоре есть данные из ss-tools, которые мог написать кто угодно: подтвердите действие сами.";
    const card = cardFrom({ ...base, reason_code: "confirmation_required_untrusted", reason }, "", 0, 0);
    expect(card.reason).toBe(reason);
  });
  it("has none on other cards (null, missing, or not a string)", () => {
    for (const reason of [null, undefined, 7, ""]) {
      expect(cardFrom({ ...base, reason }, "", 0, 0).reason).toBeNull();
    }
  });
  it("lists a batched card's calls, all checked; none for a card of one call", () => {
    const calls = [1, 2, 3].map((n) => ({ call_id: `k${n}`, title: "Деплой", prompt: `Задеплоить ${n}?`,
                                          risk: "write", env_context: "prod" }));
    const card = cardFrom({ ...base, calls }, "", 0, 0);
    expect(card.calls.map((c) => [c.callId, c.prompt, c.checked])).toEqual(
      [["k1", "Задеплоить 1?", true], ["k2", "Задеплоить 2?", true], ["k3", "Задеплоить 3?", true]]);
    expect(cardFrom(base, "", 0, 0).calls).toEqual([]);
  });
  it("shows an answered batched card from history as it was answered", () => {
    const calls = [{ call_id: "k1", result: "confirmed" }, { call_id: "k2", result: "denied" }];
    expect(cardFrom({ ...base, calls }, "", 0, 0).calls.map((c) => c.checked)).toEqual([true, false]);
  });
});
