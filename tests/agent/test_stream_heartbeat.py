"""Issue 36's wire, driven over HTTP and the real `gradio_client`: the `heartbeat` event on an
open /chat stream (submit and join) while nothing else is said, tool calls in REST history
titled in the turn's language, and Stop by run_id (owner- and tab-checked)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.rest import api, history, ok, session
from testkit.stack import Stack, stack_on_own_database

BEAT_S = 0.3


@pytest.fixture(scope="module")
def beating(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
            migrated_template: str) -> Iterator[Stack]:
    with stack_on_own_database(pg_server, migrated_template, tmp_path_factory.mktemp("beat"),
                               AGENTCHAT_AGENT_TUNING__STREAM_HEARTBEAT_S=str(BEAT_S),
                               AGENTCHAT_AGENT_TUNING__SELECTION_EMBEDDINGS="none") as s:
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


def _cancel(stack: Stack, token: str, cid: str, run_id: str, tab: str) -> Any:
    return api(stack, "POST", f"/api/agent/conversations/{cid}/runs/{run_id}/cancel", token,
               json={"tab_id": tab})


def test_stop_by_run_id_is_owner_and_tab_checked(beating: Stack, tmp_path: Path) -> None:
    alice, bob = beating.token("alice"), beating.token("bob")
    client = session(beating, alice)
    first = _raw(client, {"text": "привет", "files": [], "tab_id": "tab-a"})
    cid = first[-1]["metadata"]["conversation_id"]
    beating.fault(operation="get_health_summary", delay_s=5)
    seen: list[list[dict[str, Any]]] = []
    worker = threading.Thread(target=lambda: seen.append(_raw(
        client, {"text": "покажи здоровье окружения ss-dev", "files": [], "tab_id": "tab-a"},
        None, cid)))
    started = time.monotonic()
    worker.start()
    run = _wait("the run", lambda: (r := _active_run(beating, alice, cid))
                and r["run_id"] != first[-1]["metadata"]["run_id"] and r)
    run_id = run["run_id"]

    assert ok(_cancel(beating, bob, cid, run_id, "tab-a"), 404)["code"] == "NOT_FOUND"
    assert ok(_cancel(beating, alice, cid, run_id, "tab-b"), 409)["code"] == "CONVERSATION_BUSY"
    assert _cancel(beating, alice, cid, run_id, "bad tab id!").status_code == 422
    assert _cancel(beating, alice, cid, "no-such-run", "tab-a").status_code == 404
    assert _active_run(beating, alice, cid)["status"] == "running"  # type: ignore[index]

    stopped = ok(_cancel(beating, alice, cid, run_id, "tab-a"))
    assert stopped == {"run_id": run_id, "status": "cancelled"}
    worker.join(30)
    assert time.monotonic() - started < 5, "stopped before the slow tool answered"
    assert seen and not [e for e in seen[0] if e["metadata"].get("message_id")], "no answer"
    _wait("the run stored as cancelled",
          lambda: (_active_run(beating, alice, cid) or {}).get("status") == "cancelled")
    # Stopping it again changes nothing and says how it ended.
    assert ok(_cancel(beating, alice, cid, run_id, "tab-a"))["status"] == "cancelled"
    calls = [c for m in history(beating, alice, cid)["items"] for c in m["tool_calls"]]
    assert calls[-1]["outcome"] == "cancelled", calls
