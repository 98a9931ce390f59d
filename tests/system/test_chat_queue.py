"""`/chat`'s queue wire, served by the agent (agent/gradio/chat_queue.py; docs/protocol.md §1),
read byte by byte: the messages Gradio's clients expect, in their order, diffs that rebuild
every event, one close per session, and clear refusals of malformed queue requests that leave
the stored conversations as they were. (@gradio/client and gradio_client drive it in the rest
of the suite; tests/system/test_gradio_sessions.py checks whose session it is.)
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from gradio_client.utils import apply_diff

from agentchat.agent.gradio.chat_queue import INPUTS
from testkit.stack import Stack, stack_on_own_database


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
          migrated_template: str) -> Iterator[Stack]:
    # Small session bounds, so the test below reaches them.
    with stack_on_own_database(pg_server, migrated_template, tmp_path_factory.mktemp("queue"),
                               AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S="0.01",
                               AGENTCHAT_AGENT_TUNING__CHAT_SESSIONS_MAX="3",
                               AGENTCHAT_AGENT_TUNING__CHAT_UNREAD_SESSION_S="2") as s:
        yield s


def _api(stack: Stack) -> str:
    return stack.gradio_url + "gradio_api"


def _fn_index(stack: Stack) -> int:
    config = httpx.get(stack.gradio_url + "config", timeout=30).json()
    return int(next(d["id"] for d in config["dependencies"] if d.get("api_name") == "chat"))


def _frames(stack: Stack, token: str, session: str) -> tuple[list[dict[str, Any]], int]:
    """Every message of the session's stream until the server ends it, and in how many
    chunks they came."""
    frames, chunks, buffer = [], 0, b""
    with httpx.stream("GET", _api(stack) + "/queue/data", params={"session_hash": session},
                      headers={"Authorization": f"Bearer {token}"}, timeout=60) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        for chunk in resp.iter_raw():
            chunks += 1
            buffer += chunk
            while b"\n\n" in buffer:
                frame, buffer = buffer.split(b"\n\n", 1)
                assert frame.startswith(b"data: "), frame
                frames.append(json.loads(frame[6:]))
    assert buffer == b""
    return frames, chunks


def _join(stack: Stack, token: str, session: str, data: list[Any],
          fn_index: int | None = None) -> httpx.Response:
    return httpx.post(_api(stack) + "/queue/join", timeout=30,
                      headers={"Authorization": f"Bearer {token}"},
                      json={"data": data, "fn_index": _fn_index(stack) if fn_index is None
                            else fn_index, "session_hash": session, "event_data": None,
                            "trigger_id": None})


def _conversations(stack: Stack, token: str) -> list[Any]:
    resp = httpx.get(stack.agent.url + "/api/assistant/conversations", timeout=30,
                     headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 200, resp.text
    return list(resp.json()["items"])


def test_a_turn_on_the_wire(stack: Stack) -> None:
    """Two submits in one session share its stream: each gets estimation, process_starts,
    its events (the first whole, the next as diffs that rebuild them, seq 1, 2, …) and a
    process_completed holding its last event whole; close_stream comes once, after both."""
    alice, session = stack.token("alice"), uuid.uuid4().hex
    first = _join(stack, alice, session, ["echo 30 words", None, None, None, None, None, None])
    second = _join(stack, alice, session, ["echo 5 words"])  # the missing inputs are None
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    ids = [first.json()["event_id"], second.json()["event_id"]]
    frames, chunks = _frames(stack, alice, session)

    assert frames[-1] == {"msg": "close_stream", "event_id": None}
    assert [f["msg"] for f in frames].count("close_stream") == 1
    for event_id, words in zip(ids, (30, 5), strict=True):
        mine = [f for f in frames if f.get("event_id") == event_id]
        kinds = [f["msg"] for f in mine]
        assert kinds[:2] == ["estimation", "process_starts"], kinds
        assert kinds[-1] == "process_completed" and set(kinds[2:-1]) == {"process_generating"}
        value: Any = None
        events = []
        for f in mine[2:-1]:
            assert f["success"] is True and f["output"]["is_generating"] is True
            data = f["output"]["data"][0]
            value = data if value is None else apply_diff(value, data)
            events.append(json.loads(json.dumps(value)))
        assert [e["metadata"]["seq"] for e in events] == list(range(1, len(events) + 1))
        completed = mine[-1]["output"]
        assert completed["is_generating"] is False and completed["data"] == [events[-1]]
        assert events[-1]["metadata"].get("message_id"), events[-1]
        assert events[-1]["content"].split() == [f"w{i}" for i in range(words)]
    # Messages ready together leave together: fewer chunks than messages.
    assert chunks < len(frames)
    # A closed session is gone: reading it again is Gradio's session_not_found.
    again, _ = _frames(stack, alice, session)
    assert again == [{"msg": "unexpected_error", "message": "404: Not Found",
                      "session_not_found": True, "success": False}]


def test_malformed_queue_requests_are_refused_and_store_nothing(stack: Stack) -> None:
    alice = stack.token("alice")
    auth = {"Authorization": f"Bearer {alice}"}
    before = _conversations(stack, alice)
    session = uuid.uuid4().hex
    refused = {
        "not json": httpx.post(_api(stack) + "/queue/join", content=b"{data:", headers=auth,
                               timeout=30),
        "8 inputs": _join(stack, alice, session, ["hello"] + [None] * 7),
        "data not a list": httpx.post(_api(stack) + "/queue/join", headers=auth, timeout=30,
                                      json={"data": "hello", "fn_index": _fn_index(stack),
                                            "session_hash": session}),
        "no session": httpx.post(_api(stack) + "/queue/join", headers=auth, timeout=30,
                                 json={"data": ["hello"], "fn_index": _fn_index(stack)}),
        "another function": _join(stack, alice, session, ["hello"], fn_index=999),
        # A cross-site form or text/plain post (no preflight) is not JSON to the route.
        "text/plain": httpx.post(_api(stack) + "/queue/join", timeout=30,
                                 headers={**auth, "Content-Type": "text/plain"},
                                 content=json.dumps({"data": ["echo 3 words"],
                                                     "fn_index": _fn_index(stack),
                                                     "session_hash": session})),
        "cancel not an object": httpx.post(_api(stack) + "/cancel", content=b"[1]",
                                           headers=auth, timeout=30),
    }
    for name, resp in refused.items():
        want = (404, "NOT_FOUND") if name == "another function" else (422, "INVALID_REQUEST")
        assert (resp.status_code, resp.json().get("code")) == want, (name, resp.text)
    # Nothing was queued for the session, nor stored.
    frames, _ = _frames(stack, alice, session)
    assert frames[0].get("session_not_found") is True, frames
    assert _conversations(stack, alice) == before


def test_the_queue_takes_chats_seven_inputs_in_order(stack: Stack) -> None:
    """The queue maps `data` by position onto the inputs /chat declares (its API info)."""
    info = httpx.get(_api(stack) + "/info", timeout=30).json()
    names = [p["parameter_name"] for p in info["named_endpoints"]["/chat"]["parameters"]]
    assert names == list(INPUTS)


def test_sessions_nobody_reads_are_dropped(stack: Stack) -> None:
    """Over the replica's session cap the oldest unread session goes; the others are read,
    until the unread time (2 s here) has passed since their submits ended."""
    alice = stack.token("alice")
    sessions = [uuid.uuid4().hex for _ in range(4)]
    for session in sessions:
        assert _join(stack, alice, session, ["echo 3 words"]).status_code == 200
    oldest, _ = _frames(stack, alice, sessions[0])
    assert oldest[0].get("session_not_found") is True, oldest
    newest, _ = _frames(stack, alice, sessions[3])
    assert newest[-1] == {"msg": "close_stream", "event_id": None}, newest
    time.sleep(3)  # the submits ended within a second; 2 s later nobody had read them
    for session in sessions[1:3]:
        unread, _ = _frames(stack, alice, session)
        assert unread[0].get("session_not_found") is True, unread
