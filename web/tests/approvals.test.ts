// The approvals pages say a refusal by its code in the page's language (issue 34).
import { describe, expect, it } from "vitest";
import { RestError, UNREACHABLE } from "../src/lib/model/types.js";
import { errorText } from "../src/page/errors.js";
import { PAGE_WORDS } from "../src/page/approvals/words.js";

describe("errorText", () => {
  it("names the known codes, else shows the detail", () => {
    const ru = PAGE_WORDS.ru;
    expect(errorText(new RestError(403, "FORBIDDEN", "the requester"), ru)).toBe(ru.errors.FORBIDDEN);
    expect(errorText(new RestError(409, "STALE_CONFIRMATION", ""), PAGE_WORDS.en)).toMatch(/arguments changed/);
    expect(errorText(new RestError(0, UNREACHABLE, "x"), ru)).toBe(ru.unreachable);
    expect(errorText(new RestError(422, "INVALID_REQUEST", "grant_minutes: too big"), ru))
      .toBe("Не удалось: grant_minutes: too big");
  });
  it("has every word in both languages", () => {
    expect(Object.keys(PAGE_WORDS.en.errors).sort()).toEqual(Object.keys(PAGE_WORDS.ru.errors).sort());
  });
});
