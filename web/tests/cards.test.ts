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
});
