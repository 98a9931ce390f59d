"""Gradio's upload route cannot fill the pod's disk (issue 31, hole 3).

Per user and replica: at most 5 files / the /chat limits in one request, 20 files (this module:
the default) and a byte quota in the upload folder, 10 uploads a minute; over them 413
INVALID_REQUEST or 429 RATE_LIMITED before Gradio writes anything. Unused uploads expire and
the sweeper deletes them; deleting a conversation deletes the uploads its messages used.
Every test is a fresh user, so the per-user quotas of one never touch another's.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.reliability import history_items, say, wait_for
from testkit.stack import Stack, stack_on_own_database
from testkit.support import Service

USER_BYTES = 300_000  # this module's per-user byte quota (the default is 20 MB)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
          migrated_template: str) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("quota")
    # The testkit lifts the quotas for other tests; here they are the defaults, but bytes.
    with stack_on_own_database(pg_server, migrated_template, tmp,
                               GRADIO_TEMP_DIR=str(tmp / "gradio"),
                               AGENTCHAT_AGENT_TUNING__UPLOADS_PER_MINUTE_PER_USER="10",
                               AGENTCHAT_AGENT_TUNING__UPLOAD_FILES_PER_USER="20",
                               AGENTCHAT_AGENT_TUNING__UPLOAD_BYTES_PER_USER=str(USER_BYTES),
                               AGENTCHAT_AGENT_UPLOAD_BYTES_PER_REPLICA=str(48 << 20)) as s:
        yield s


def folder(stack: Stack, agent: Service | None = None) -> Path:
    env = agent.env if agent is not None else stack.agent_env
    return Path(env["GRADIO_TEMP_DIR"])


def stored(where: Path) -> list[Path]:
    """Every file in an agent's upload folder (Gradio's temporary parts included)."""
    return [Path(r) / n for r, _, names in os.walk(where) for n in names]


def fresh(stack: Stack) -> str:
    return stack.token("u-" + uuid.uuid4().hex[:10])


def upload(url: str, token: str, files: list[tuple[str, bytes]], chunked: bool = False,
           app: str = "") -> httpx.Response:
    """POST …/gradio_api/upload as the frontend does; `chunked`: no Content-Length, so only
    counting the parts as they stream can refuse it; `app`: "/page" for the page's own app."""
    headers = {"Authorization": f"Bearer {token}"}
    url = url + f"/api/agent/gradio{app}/gradio_api/upload"
    if not chunked:
        return httpx.post(url, headers=headers, files=[("files", f) for f in files], timeout=30)
    body = httpx.Request("POST", url, files=[("files", f) for f in files])
    body.read()
    headers["Content-Type"] = body.headers["Content-Type"]
    content = body.content

    def parts() -> Iterator[bytes]:
        for i in range(0, len(content), 4096):
            yield content[i:i + 4096]

    return httpx.post(url, headers=headers, content=parts(), timeout=30)


def texts(n: int, size: int = 100) -> list[tuple[str, bytes]]:
    tag = uuid.uuid4().hex
    return [(f"f{i}.txt", f"{tag}-{i}-".encode().ljust(size, b"x")) for i in range(n)]


def refused(resp: httpx.Response, status: int) -> None:
    assert resp.status_code == status, (resp.status_code, resp.text[:300])
    code = "RATE_LIMITED" if status == 429 else "INVALID_REQUEST"
    assert resp.json()["code"] == code and resp.json()["detail"], resp.text


def filedata(path: str) -> dict[str, Any]:
    return {"path": path, "orig_name": os.path.basename(path),
            "meta": {"_type": "gradio.FileData"}}


# --- the flood ---------------------------------------------------------------------------------


@pytest.mark.parametrize("chunked", [False, True])
def test_one_request_with_50_files_is_refused_before_anything_is_written(
        stack: Stack, chunked: bool) -> None:
    token = fresh(stack)
    before = len(stored(folder(stack)))
    refused(upload(stack.agent.url, token, texts(50), chunked), 413)
    refused(upload(stack.agent.url, token, texts(50), chunked, app="/page"), 413)
    refused(upload(stack.agent.url, token, [("big.txt", b"x" * 400_000)], chunked), 413)
    assert len(stored(folder(stack))) == before, "nothing of it reached the upload folder"
    # Control: the /chat limit itself (5 files) passes, from the same user.
    ok = upload(stack.agent.url, token, texts(5), chunked)
    assert ok.status_code == 200 and len(ok.json()) == 5, ok.text
    assert len(stored(folder(stack))) == before + 5


def test_parts_gradio_would_leave_behind_are_refused(stack: Stack) -> None:
    """A name Gradio cannot store fails its request after the parts are on disk, and a file in
    another field is never moved: both would stay in the folder, owned by no one."""
    token = fresh(stack)
    url = stack.agent.url + "/api/agent/gradio/gradio_api/upload"
    headers = {"Authorization": f"Bearer {token}"}
    before = len(stored(folder(stack)))
    answers = [httpx.post(url, headers=headers, files=files, timeout=30) for files in (
        [("files", f) for f in [*texts(2), ("..", b"x" * 100)]],
        [("other", f) for f in texts(3)])]
    assert len(stored(folder(stack))) == before, "nothing left in the upload folder"
    for resp in answers:
        refused(resp, 400)


def test_many_requests_stop_at_the_users_quota(stack: Stack) -> None:
    token = fresh(stack)
    before = len(stored(folder(stack)))
    for _ in range(4):  # 20 files, the user's quota
        assert upload(stack.agent.url, token, texts(5)).status_code == 200
    refused(upload(stack.agent.url, token, texts(1)), 413)
    assert len(stored(folder(stack))) == before + 20, "the folder holds the quota, no more"
    # Bytes: another user, 250 KB of the 300 KB quota, then 100 KB more is refused.
    other = fresh(stack)
    assert upload(stack.agent.url, other, texts(1, 250_000)).status_code == 200
    refused(upload(stack.agent.url, other, texts(1, 100_000)), 413)
    assert upload(stack.agent.url, other, texts(1, 40_000)).status_code == 200, "what fits"


def test_uploads_past_the_rate_are_refused(stack: Stack) -> None:
    token = fresh(stack)
    for _ in range(10):
        assert upload(stack.agent.url, token, texts(1)).status_code == 200
    before = len(stored(folder(stack)))
    refused(upload(stack.agent.url, token, texts(1)), 429)
    assert len(stored(folder(stack))) == before
    # Per user: someone else uploads meanwhile.
    assert upload(stack.agent.url, fresh(stack), texts(1)).status_code == 200


# --- what still works, and what lets go ----------------------------------------------------------


def test_an_upload_within_the_quota_reaches_the_model(stack: Stack) -> None:
    token = fresh(stack)
    marker = "маркер-" + uuid.uuid4().hex
    resp = upload(stack.agent.url, token, [("note.txt", f"строка {marker}".encode())])
    assert resp.status_code == 200, resp.text
    out = say(stack.agent, token, {"text": "прочитай файл", "files": [filedata(resp.json()[0])]})
    assert out.kind == "final", out.types()
    user = history_items(stack.agent, token, str(out.conversation_id))[0]
    assert f"[file note.txt]\nстрока {marker}" in user["content"]


def test_deleting_a_conversation_deletes_its_uploads(stack: Stack) -> None:
    token = fresh(stack)
    used, kept = (Path(upload(stack.agent.url, token, texts(1)).json()[0]) for _ in range(2))
    out = say(stack.agent, token, {"text": "прочитай файл", "files": [filedata(str(used))]})
    assert out.kind == "final", out.types()
    assert used.exists()
    resp = httpx.delete(stack.agent.url + f"/api/assistant/conversations/{out.conversation_id}",
                        headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert resp.status_code == 200, resp.text
    assert not used.exists(), "the conversation's upload is deleted with it"
    assert kept.exists(), "an upload it did not use stays"
    again = say(stack.agent, token, {"text": "ещё раз", "files": [filedata(str(used))]})
    assert again.last.get("code") == "INVALID_REQUEST", again.types()


def test_files_left_from_before_a_restart_are_swept(stack: Stack, tmp_path: Path) -> None:
    """The pod's emptyDir outlives a container restart, the owner map does not: files no one
    owns are deleted once unused (their mtime) for the expiry; recent ones stay."""
    where = tmp_path / "gradio"
    old, recent = where / ("a" * 64) / "old.txt", where / ("b" * 64) / "recent.txt"
    for p in (old, recent):
        p.parent.mkdir(parents=True)
        p.write_bytes(b"left by the previous process")
    os.utime(old, (time.time() - 120, time.time() - 120))
    agent = stack.start_agent(GRADIO_TEMP_DIR=str(where),
                              AGENTCHAT_AGENT_TUNING__UPLOAD_EXPIRY_S="60")
    try:
        wait_for(lambda: not old.exists(), "the sweeper deletes the forgotten file", 30)
        assert recent.exists()
    finally:
        agent.stop()


def test_unused_uploads_expire_and_free_the_quota(stack: Stack, tmp_path: Path) -> None:
    expiry = 6.0
    agent = stack.start_agent(GRADIO_TEMP_DIR=str(tmp_path / "gradio"),
                              AGENTCHAT_AGENT_TUNING__UPLOAD_EXPIRY_S=str(expiry),
                              AGENTCHAT_AGENT_TUNING__UPLOAD_FILES_PER_USER="2",
                              AGENTCHAT_AGENT_UPLOAD_BYTES_PER_REPLICA="200000")
    try:
        alice, bob = fresh(stack), fresh(stack)
        started = time.monotonic()
        idle, used = (Path(upload(agent.url, alice, texts(1, 70_000)).json()[0])
                      for _ in range(2))
        refused(upload(agent.url, alice, texts(1)), 413)  # alice's two files
        refused(upload(agent.url, bob, texts(1, 100_000)), 429)  # the replica's space
        time.sleep(max(0.0, started + expiry / 2 - time.monotonic()))
        touched = time.monotonic()
        out = say(agent, alice, {"text": "прочитай файл", "files": [filedata(str(used))]})
        assert out.kind == "final", out.types()
        wait_for(lambda: not idle.exists(), "the sweeper deletes the idle upload", 30)
        still = used.exists()  # read first: it cannot go before touched + expiry
        if time.monotonic() < touched + expiry:  # else the machine was too slow to tell
            assert still, "a /chat submit's use started its expiry again"
        wait_for(lambda: not used.exists(), "then the used one, once idle", 30)
        assert stored(tmp_path / "gradio") == [], "nothing left in the upload folder"
        assert upload(agent.url, alice, texts(2)).status_code == 200, "alice's quota is free"
        assert upload(agent.url, bob, texts(1, 100_000)).status_code == 200, "and the replica's"
    finally:
        agent.stop()
