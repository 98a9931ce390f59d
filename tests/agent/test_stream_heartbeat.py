"""Issue 36's wire, driven over HTTP and the real `gradio_client`: the `heartbeat` event on an
open /chat stream (submit and join) while nothing else is said, tool calls in REST history
titled in the turn's language, and Stop by run_id (owner- and tab-checked)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from testkit.rest import api, history, ok, session
from testkit.stack import Stack, stack_on_own_database

BEAT_S = 0.3


@pytest.fixture(scope="module")
def beating(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
            migrated_template: str) -> Iterator[Stack]:
    with stack_on_own_database(pg_server, migrated_template, tmp_path_factory.mktemp("beat"),
                               AGENTCHAT_AGENT_STREAM_HEARTBEAT_S=str(BEAT_S),
                               AGENTCHAT_AGENT_SELECTION_EMBEDDINGS="none") as s:
        yield s


def _raw(client: Any, *args: Any) -> list[dict[str, Any]]:
    """Every value the stream yielded, repeats and heartbeats included."""
    job = client.submit(*args, api_name="/chat")
    job.result(timeout=120)
    return [dict(o) for o in job.outputs()]


def _active_run(stack: Stack, token: str, cid: str) -> dict[str, Any] | None:
    run = ok(api(stack, "GET", f"/api/agent/conversations/{cid}/active", token))["run"]
    return dict(run) if run else None


def _wait(what: str, check: Any, bound_s: float = 20.0) -> Any:
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {bound_s} s")


def _check_beats(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The beats carry the run and the seq of the event before them; the other events are
    the run's 1, 2, 3… as ever."""
    beats, seq, run_id = [], 0, None
    for e in events:
        meta = e["metadata"]
        if meta.get("type") == "heartbeat":
            beats.append(meta)
            assert meta["seq"] == seq, (meta, seq)
            assert run_id is None or meta["run_id"] == run_id
        else:
            assert meta["seq"] in (seq, seq + 1), "no seq skipped or taken by a beat"
            seq, run_id = meta["seq"], meta["run_id"]
    return beats


def test_a_silent_stream_beats_and_a_join_too(beating: Stack) -> None:
    token = beating.token("alice")
    client = session(beating, token)
    beating.fault(operation="get_health_summary", delay_s=2)
    events = _raw(client, {"text": "покажи здоровье окружения ss-dev", "files": [],
                           "tab_id": "t1"})
    beats = _check_beats(events)
    assert events[-1]["metadata"].get("message_id"), "the turn still ends with its answer"
    # 2 s of a slow tool at one beat per 0.3 s of silence: several, each naming the run.
    assert len(beats) >= 3, [e["metadata"].get("type") for e in events]
    run_id = events[-1]["metadata"]["run_id"]
    assert {b["run_id"] for b in beats} == {run_id}
    assert all(b["conversation_id"] == events[-1]["metadata"]["conversation_id"] for b in beats)

    # A join of a run that goes on: the same beats while its tool is slow.
    cid = events[-1]["metadata"]["conversation_id"]
    beating.fault(operation="get_health_summary", delay_s=2)
    mine: list[list[dict[str, Any]]] = []
    worker = threading.Thread(target=lambda: mine.append(_raw(
        client, {"text": "покажи здоровье окружения ss-dev", "files": [], "tab_id": "t1"},
        None, cid)))
    worker.start()
    run = _wait("the second run", lambda: (r := _active_run(beating, token, cid))
                and r["run_id"] != run_id and r)
    joined = _raw(session(beating, token), {"text": "", "files": [], "run_id": run["run_id"],
                                            "last_seq": 0}, "join", cid)
    worker.join(60)
    assert _check_beats(joined), "a join beats while its run is silent"
    assert [e for e in joined if e["metadata"].get("type") != "heartbeat"][-1]["metadata"][
        "run_id"] == run["run_id"]


def test_history_titles_tool_calls_in_the_turns_language(beating: Stack) -> None:
    token = beating.token("alice")
    client = session(beating, token)
    titles = {}
    for text in ("покажи здоровье окружения ss-dev", "show the health of ss-dev"):
        events = _raw(client, {"text": text, "files": []})
        cid = events[-1]["metadata"]["conversation_id"]
        live = [e["metadata"] for e in events if e["metadata"].get("type") == "tool_start"]
        calls = [c for m in history(beating, token, cid)["items"] for c in m["tool_calls"]]
        assert [(c["call_id"], c["title"]) for c in calls] == [
            (s["call_id"], s["title"]) for s in live]
        assert all(c["outcome"] == "ok" for c in calls)
        titles[text] = calls[0]["title"]
    assert titles == {"покажи здоровье окружения ss-dev": "Отчёт о состоянии",
                      "show the health of ss-dev": "Health report"}
