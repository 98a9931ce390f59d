"""The one-line text of an approval notification (docs/protocol.md §11): the webhook's `text`,
which a Slack or Mattermost incoming webhook shows as is, and the e-mail's subject and first
line.

Everything in it but our own words and the approval's link comes from people: the requester's
and approver's names, the card's prompt (a dashboard's title in it), the tool. In a chat
message that text must stay text, never a link, a mention or an image:

- one line: whitespace and control characters become one space, bidi overrides are dropped
  (no heading, quote or list starts; no text that reads backwards);
- Slack's control characters escaped as it asks: `&` `<` `>` → `&amp;` `&lt;` `&gt;` (no
  `<https://evil|Одобрить>` link, no `<!channel>`); Mattermost's Markdown shows the same
  entities as the characters;
- a WORD JOINER (U+2060, invisible) after every character that starts a link or a mention in
  either: `@` (`@channel`, `@here`, `@all`, `@user`, an e-mail), `#` `~` (channels,
  hashtags), `[` `]` (Markdown links and images: `](` never meet), `:` (`https:`,
  `mailto:`) and `.` (bare domains, `www.`), so none of them is followed by what makes it
  one. A title's own `(№42)` stays as it is.

The e-mail gets the same line with none of the chat escapes (its HTML part escapes for HTML).
"""

from __future__ import annotations

import re
from typing import Any

from agentchat.words import pick, turn_language

WORD_JOINER = "\u2060"
_SLACK = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
_BREAK_AFTER = re.compile(r"([@#~\[\]:.])")
_SPACES = re.compile(r"[\s\x00-\x1f\x7f-\x9f]+")
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def one_line(value: object) -> str:
    return _SPACES.sub(" ", _BIDI.sub("", str(value))).strip()


def inert(value: object) -> str:
    """People's text made plain text in Slack and Mattermost (module docstring)."""
    return _BREAK_AFTER.sub(r"\1" + WORD_JOINER, one_line(value).translate(_SLACK))


def summary(body: dict[str, Any], link: str, *, chat: bool = True) -> str:
    """The one-line text, in the card's language (its prompt's): for a chat webhook (`chat`,
    people's text inert) or an e-mail. `link` is ours (the public URL and the approval's
    page) and goes as is, last."""
    text = inert if chat else one_line
    lang = turn_language(str(body.get("prompt") or ""))
    who = text(body.get("requester"))
    what = text(body.get("prompt") or body.get("tool_name"))
    calls = body.get("calls")
    if isinstance(calls, list) and len(calls) > 1:  # a card of several calls: each named
        what = "; ".join(text(c.get("prompt") or c.get("tool_name")) for c in calls
                         if isinstance(c, dict))
    event = body.get("event")
    if event == "approval_answered":
        approve = body.get("decision") == "approve"
        verb = pick(lang, "одобрил" if approve else "отклонил",
                    "approved" if approve else "denied")
        approver = text(body.get("approver"))
        return pick(lang, f"{approver} {verb} запрос {who}: {what} {link}",
                    f"{approver} {verb} {who}'s request: {what} {link}")
    head = {"approval_requested": pick(lang, "Нужно одобрение", "Approval needed"),
            "approval_escalated": pick(lang, "Всё ещё ждёт одобрения", "Still awaiting approval"),
            "approval_expired": pick(lang, "Срок одобрения истёк", "Approval expired")}
    return f"{head.get(str(event), text(event))}: {who}: {what} {link}"
