"""An approval notification's `text` keeps people's words as words in Slack and Mattermost
(agent/chat/notice_text.py, docs/protocol.md §11): a dashboard title, a requester's or an
approver's name can never become a link, an image or a mention there, whatever they hold;
the text still reads as they wrote it; the JSON payload's other fields stay raw data. The
delivery test sends a real signed webhook to a real HTTP receiver."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentchat.agent.chat.notice_text import WORD_JOINER, summary
from agentchat.agent.chat.notify import Notifications
from agentchat.agent.settings import AgentSettings
from agentchat.db import create_pool
from agentchat.http_clients import async_client

LINK = "https://ss.example.com/api/agent/ui/approvals/abc-1"
HOSTILE = "<https://evil|Одобрить> <!channel>"
# What Slack and Mattermost make links, images and mentions of, and what hides text.
ATTACKS = [HOSTILE, "<!here>", "<@U123>", "<#C1|general>", "@channel", "@here", "@all",
           "@alice", "[Одобрить](https://evil)", "![p](http://t/p.png)", "[x]: http://e",
           "https://evil.example", "www.evil.com", "evil.com", "mailto:a@b.co", "a@b.co",
           "~town-square", "#general", "&amp;lt;", "\u202eevil", "\n# heading\n> quote",
           "`code`", "*bold* _it_", "\x00\x1b[31m", "javascript:alert(1)"]
EVENTS = ["approval_requested", "approval_answered", "approval_escalated", "approval_expired"]
MENTION_OR_LINK = [r"[<>\n\r]", r"&(?!amp;|lt;|gt;)", r"@\w", r"\]\(", r"\]\[", r":/", r":\w",
                   r"\.\w", r"[#~]\w", "[\u202a-\u202e\u2066-\u2069]"]

people_text = st.lists(st.one_of(st.sampled_from(ATTACKS), st.text(max_size=30)),
                       max_size=6).map("".join)


def body_of(event: str, requester: str, prompt: str, approver: str,
            calls: list[str] | None = None) -> dict[str, Any]:
    return {"event": event, "requester": requester, "prompt": prompt, "approver": approver,
            "decision": "approve", "tool_name": "deploy_dashboard",
            "calls": [{"prompt": p, "tool_name": "deploy_dashboard"} for p in calls]
            if calls else None}


def readable(text: str) -> str:
    """What a person sees: the joiners are invisible, the entities are their characters."""
    return (text.replace(WORD_JOINER, "").replace("&lt;", "<").replace("&gt;", ">")
            .replace("&amp;", "&"))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(EVENTS), people_text, people_text, people_text,
       st.one_of(st.none(), st.lists(people_text, min_size=2, max_size=3)))
def test_peoples_text_is_never_a_link_or_a_mention(event: str, requester: str, prompt: str,
                                                   approver: str,
                                                   calls: list[str] | None) -> None:
    body = body_of(event, requester, prompt, approver, calls)
    text = summary(body, LINK)
    assert text.endswith(" " + LINK) and text.count(LINK) == 1  # the one link is ours
    theirs = text[:-len(LINK)]
    for pattern in MENTION_OR_LINK:
        assert not re.search(pattern, theirs), (pattern, theirs)
    # ... and reads as they wrote it (on one line): the e-mail's text, unescaped.
    assert readable(text) == summary(body, LINK, chat=False)
    assert "\n" not in summary(body, LINK, chat=False)


def test_the_hostile_title_arrives_inert() -> None:
    text = summary(body_of("approval_requested", "bob",
                           f"Задеплоить дашборд «{HOSTILE}» (№42) в prod?", ""), LINK)
    j = WORD_JOINER
    assert text == (f"Нужно одобрение: bob: Задеплоить дашборд «&lt;https:{j}//evil|Одобрить&gt; "
                    f"&lt;!channel&gt;» (№42) в prod? {LINK}")


class Receiver(BaseHTTPRequestHandler):
    got: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        Receiver.got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    Receiver.got = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def test_the_webhook_text_is_inert_and_the_other_fields_raw(receiver: str,
                                                            database_url: str) -> None:
    title = f"«{HOSTILE}» (№42)"
    prompt = f"Задеплоить дашборд {title} в prod?"
    row = {"id": "n-1", "event": "approval_requested", "approval_id": "abc-1",
           "attempts": 0, "channels": ["webhook"],
           "body": {"approval_id": "abc-1", "requester": "@here", "title": title,
                    "prompt": prompt, "tool_name": "deploy_dashboard",
                    "approve_url": "/api/agent/ui/approvals/abc-1"}}
    settings_ = AgentSettings(mode="dev", approval_webhook_url=receiver,
                              approval_webhook_secret="s" * 16,
                              public_url="https://ss.example.com")

    async def deliver() -> None:
        pool = create_pool(database_url, max_size=2)
        await pool.open(wait=True)
        try:
            async with async_client() as http:
                await Notifications(settings_, pool, http).deliver(row)
        finally:
            await pool.close()

    asyncio.run(deliver())
    [got] = Receiver.got
    assert (got["title"], got["prompt"], got["requester"]) == (title, prompt, "@here")
    assert got["approve_url"] == LINK
    assert got["text"] == summary({**row["body"], "event": "approval_requested"}, LINK)
    assert "<" not in got["text"] and f"@{WORD_JOINER}here" in got["text"]
