"""Hostile `message.files` through Gradio's HTTP API, and the upload and file routes.

A file reaches the model only if it was uploaded through `…/gradio_api/upload` by the user who
names it, and is a regular file in Gradio's upload folder. Everything else (a plain path, a
`{path}` dict, a FileData-tagged path outside the folder, a link, a device, a FIFO, `..`,
another user's upload, over a limit) is INVALID_REQUEST: an HTTP 422 before Gradio's queue for
FileData, an `error` event from the handler for the rest. Nothing of the file is streamed,
stored or copied into the cache, and another user's turn keeps streaming meanwhile.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gradio_client import Client, handle_file

from testkit.raw_chat import Outcome, RawChat
from testkit.reliability import history_items, rows, run, say
from testkit.stack import Stack, stack_on_own_database

TOTAL_CAP = 100_000  # this module's max_files_total_bytes, so two files can pass it
PASSWD = Path("/etc/passwd").read_bytes()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
          migrated_template: str) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("files")
    # An upload folder of its own, to see what Gradio copied into it; answers paced like a
    # model, so bob's long turn streams while the attacks arrive.
    with stack_on_own_database(pg_server, migrated_template, tmp,
                               GRADIO_TEMP_DIR=str(tmp / "gradio"),
                               AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S="0.02",
                               AGENTCHAT_AGENT_TUNING__MAX_FILES_TOTAL_BYTES=str(TOTAL_CAP)) as s:
        yield s


def cache(stack: Stack) -> Path:
    return Path(stack.agent_env["GRADIO_TEMP_DIR"])


def api(stack: Stack) -> str:
    return stack.gradio_url + "gradio_api"


def filedata(path: str) -> dict[str, Any]:
    return {"path": path, "orig_name": os.path.basename(path), "size": 10,
            "meta": {"_type": "gradio.FileData"}}


def upload(stack: Stack, token: str | None, name: str, data: bytes) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(api(stack) + "/upload", headers=headers, timeout=30,
                      files={"files": (name, data)})


def uploaded(stack: Stack, token: str, name: str, data: bytes) -> str:
    resp = upload(stack, token, name, data)
    assert resp.status_code == 200, resp.text
    return str(resp.json()[0])


def message(files: list[Any], text: str = "прочитай файл") -> dict[str, Any]:
    return {"text": text, "files": files}


async def _call_route(stack: Stack, token: str | None, data: list[Any]) -> tuple[int, str]:
    """POST …/call/chat, then its SSE stream; (status, everything the client received)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(timeout=60) as http:
        resp = await http.post(api(stack) + "/call/chat", headers=headers, json={"data": data})
        if resp.status_code != 200:
            return resp.status_code, resp.text
        event_id = resp.json()["event_id"]
        stream = await http.get(api(stack) + f"/call/chat/{event_id}", headers=headers)
        return 200, stream.text


def attempt(stack: Stack, token: str | None, files: list[Any], cid: str | None = None,
            via: str = "join", session: str | None = None) -> tuple[str, str]:
    """One submit naming `files`; (the INVALID_REQUEST-or-other code, all text received).
    `session`: the Gradio session (tab) that holds `cid`'s lease."""
    data = [message(files), None, cid, None, None, None, None]
    if via == "call":
        status, text = run(_call_route(stack, token, data))
        if status != 200:
            return json.loads(text)["code"], text
        payloads = [json.loads(line[5:]) for line in text.splitlines()
                    if line.startswith("data:") and line[5:].strip() not in ("", "null")]
        events = [p[0] for p in payloads if isinstance(p, list) and p]
        return str(events[-1]["metadata"].get("code", "final")), text

    async def go() -> tuple[str, str]:
        async with httpx.AsyncClient(timeout=60) as http:
            tab = RawChat(stack.agent.url, token or "", http)
            if token is None:
                tab.headers = {}
            tab.session = session or tab.session
            join = await http.post(tab.base + "/queue/join", headers=tab.headers, json={
                "data": data, "fn_index": await tab.fn_index(), "session_hash": tab.session,
                "event_data": None})
            if join.status_code != 200:
                return join.json()["code"], join.text
            out = Outcome(event_id=join.json()["event_id"])
            await tab._read(out, None, 60, None)
            return str(out.last.get("code", out.kind)), json.dumps(out.events)

    return run(go())


def cached_bytes(stack: Stack) -> list[bytes]:
    out = []
    for root, _, names in os.walk(cache(stack)):
        for n in names:
            p = Path(root) / n
            if p.is_file() and not p.is_symlink():
                out.append(p.read_bytes())
    return out


def secrets_of(stack: Stack) -> list[bytes]:
    keys = stack.data_dir / "keys" / "signing-keys.json"
    return [PASSWD, keys.read_bytes()]


def assert_nothing_leaked(stack: Stack, text: str) -> None:
    for secret in secrets_of(stack):
        line = max(secret.decode().splitlines(), key=len).strip()[:40]  # a telling line
        assert line not in text, "the file's content reached the client"
        found = rows(stack.database_url, "SELECT count(*) AS n FROM messages"
                     " WHERE position(%s in content) > 0", line)
        assert found[0]["n"] == 0, "the file's content was stored"
    cached = cached_bytes(stack)
    for secret in [*secrets_of(stack)]:
        assert secret not in cached, "the file was copied into Gradio's cache"


# --- the upload and file routes ----------------------------------------------------------------


def test_upload_and_file_routes_need_a_valid_token(stack: Stack) -> None:
    alice = stack.token("alice")
    forged = alice[:-4] + ("AAAA" if not alice.endswith("AAAA") else "BBBB")
    for token in (None, forged, "not-a-jwt"):
        resp = upload(stack, token, "a.txt", b"hello")
        assert resp.status_code == 401, (token, resp.status_code, resp.text)
        assert resp.json()["code"] == "UNAUTHORIZED"
    before = len(cached_bytes(stack))
    assert len(cached_bytes(stack)) == before, "a refused upload left nothing"
    path = uploaded(stack, alice, "a.txt", b"hello " + uuid.uuid4().bytes.hex().encode())
    for route in (f"/file={path}", f"/file/{path.lstrip('/')}"):
        for token in (None, forged):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            resp = httpx.get(api(stack) + route, headers=headers, timeout=10)
            assert resp.status_code == 401, (route, resp.status_code)
            assert resp.json()["code"] == "UNAUTHORIZED"
    mine = httpx.get(api(stack) + f"/file={path}", timeout=10,
                     headers={"Authorization": f"Bearer {alice}"})
    assert mine.status_code == 200 and mine.content.startswith(b"hello ")
    theirs = httpx.get(api(stack) + f"/file={path}", timeout=10,
                       headers={"Authorization": f"Bearer {stack.token('bob')}"})
    assert theirs.status_code == 404, "bob does not read alice's upload"
    # The limit is the agent's max_file_bytes, enforced by Gradio itself.
    assert upload(stack, alice, "big.txt", b"x" * (1024 * 1024 + 1)).status_code == 413


def test_alices_upload_named_in_bobs_submit_is_refused(stack: Stack) -> None:
    secret = "alice-only-" + uuid.uuid4().hex
    path = uploaded(stack, stack.token("alice"), "notes.txt", secret.encode())
    bob = stack.token("bob")
    tab = RawChat(stack.agent.url, bob, None)  # type: ignore[arg-type]
    cid = say(stack.agent, bob, "привет", tab=tab).conversation_id
    for files in ([filedata(path)], [{"path": path}]):
        code, text = attempt(stack, bob, files, cid, session=tab.session)
        assert code == "INVALID_REQUEST", (files, text[:300])
        assert secret not in text
    assert rows(stack.database_url, "SELECT count(*) AS n FROM messages"
                " WHERE position(%s in content) > 0", secret)[0]["n"] == 0
    assert len(history_items(stack.agent, bob, str(cid))) == 2, "only the first turn"
    # On a new conversation the refusal leaves nothing, not even an empty conversation.
    mallory = "mallory-" + uuid.uuid4().hex[:8]
    code, _ = attempt(stack, stack.token(mallory, ["viewer"]), [filedata(path)], None)
    assert code == "INVALID_REQUEST"
    assert rows(stack.database_url, "SELECT count(*) AS n FROM conversations WHERE owner=%s",
                mallory)[0]["n"] == 0


# --- hostile files -----------------------------------------------------------------------------


def hostile_files(stack: Stack) -> dict[str, dict[str, Any] | str]:
    c = cache(stack)
    (c / "evil").mkdir(parents=True, exist_ok=True)
    link = c / "evil" / "passwd.txt"
    if not link.is_symlink():
        link.symlink_to("/etc/passwd")
    etc = c / "etc-link"
    if not etc.is_symlink():
        etc.symlink_to("/etc")
    keys = str(stack.data_dir / "keys" / "signing-keys.json")
    escape = f"{c}/evil/../../../../../etc/passwd"
    return {
        "plain string": "/etc/passwd",
        "{path} dict": {"path": "/etc/passwd"},
        "FileData /etc/passwd": filedata("/etc/passwd"),
        "FileData signing keys": filedata(keys),
        "{path} signing keys": {"path": keys},
        "FileData link in the cache": filedata(str(link)),
        "{path} link in the cache": {"path": str(link)},
        "FileData through a linked folder": filedata(str(etc / "passwd")),
        "FileData .. escape": filedata(escape),
        "{path} .. escape": {"path": escape},
        "FileData URL": filedata("http://127.0.0.1:9/x.txt"),
        "FileData relative": filedata("etc/passwd"),
    }


@pytest.mark.parametrize("via", ["join", "call"])
@pytest.mark.parametrize("with_token", [True, False])
def test_hostile_files_are_refused_and_leave_nothing(stack: Stack, via: str,
                                                     with_token: bool) -> None:
    alice = stack.token("alice")
    tab = RawChat(stack.agent.url, alice, None)  # type: ignore[arg-type]
    cid = say(stack.agent, alice, "привет", tab=tab).conversation_id
    before = rows(stack.database_url, "SELECT count(*) AS n FROM messages")[0]["n"]
    for name, f in hostile_files(stack).items():
        for target in (None, cid):
            started = time.monotonic()
            # Without a token, on a session of its own: alice's is hers
            # (agent/gradio/session_guard.py answers 401 before the file is looked at).
            code, text = attempt(stack, alice if with_token else None, [f], target, via,
                                 session=tab.session if with_token else None)
            assert code == "INVALID_REQUEST", (name, target, text[:300])
            assert time.monotonic() - started < 20, (name, "answered at once")
            assert_nothing_leaked(stack, text)
    assert rows(stack.database_url, "SELECT count(*) AS n FROM messages")[0]["n"] == before
    assert len(history_items(stack.agent, alice, str(cid))) == 2
    assert say(stack.agent, alice, "привет", None, cid, tab=tab).kind == "final", (
        "the next turn works")


def test_uploads_replaced_by_a_link_or_a_fifo_are_refused(stack: Stack) -> None:
    """A recorded upload swapped for a link or a FIFO (as a race would) is still refused: the
    reader opens with O_NOFOLLOW | O_NONBLOCK and wants a regular file."""
    alice = stack.token("alice")
    for kind in ("link", "fifo", "gone"):
        path = Path(uploaded(stack, alice, f"{kind}.txt", uuid.uuid4().hex.encode()))
        path.unlink()
        if kind == "link":
            path.symlink_to("/etc/passwd")
        elif kind == "fifo":
            os.mkfifo(path)
        started = time.monotonic()
        code, text = attempt(stack, alice, [filedata(str(path))])
        assert code == "INVALID_REQUEST", (kind, text[:300])
        assert time.monotonic() - started < 20, kind
        assert_nothing_leaked(stack, text)


def test_dev_zero_never_stalls_another_users_turn(stack: Stack) -> None:
    bob = stack.token("bob")
    result: dict[str, Any] = {}

    def bobs_turn() -> None:
        started = time.monotonic()
        result["out"] = say(stack.agent, bob, "привет and echo 600 words", timeout=90)
        result["took"] = time.monotonic() - started

    thread = threading.Thread(target=bobs_turn)
    thread.start()
    time.sleep(1.0)  # bob's turn is streaming
    zero: list[Any] = ["/dev/zero", {"path": "/dev/zero"}, filedata("/dev/zero"),
                       {"path": "/dev/zero", "size": 0}]
    for token in (stack.token("alice"), None):
        for f in zero:
            for via in ("join", "call"):
                started = time.monotonic()
                code, _ = attempt(stack, token, [f], None, via)
                assert code == "INVALID_REQUEST", (f, via)
                assert time.monotonic() - started < 20
    thread.join(timeout=90)
    assert not thread.is_alive(), "bob's turn finished"
    assert result["out"].kind == "final", result["out"].types()
    assert result["took"] < 60, result["took"]
    assert len(result["out"].events[-1]["content"].split()) >= 600


def test_over_the_total_cap_is_refused(stack: Stack) -> None:
    alice = stack.token("alice")
    client = Client(stack.gradio_url, headers={"Authorization": f"Bearer {alice}"},
                    verbose=False)
    tmp = cache(stack).parent
    files = []
    for i in range(2):
        p = tmp / f"part{i}.txt"
        p.write_text(f"{i}" * (TOTAL_CAP // 2 + 10))
        files.append(handle_file(str(p)))
    last = client.submit(message(files, "read the files"),  # English: the server's detail
                         api_name="/chat").result(timeout=120)["metadata"]
    assert last["type"] == "error" and last["code"] == "INVALID_REQUEST", last
    assert "together" in last["detail"]


# --- what still works ----------------------------------------------------------------------------


def test_python_client_upload_reaches_the_model_as_text(stack: Stack, tmp_path: Path) -> None:
    alice = stack.token("alice")
    client = Client(stack.gradio_url, headers={"Authorization": f"Bearer {alice}"},
                    verbose=False)
    marker = "маркер-" + uuid.uuid4().hex
    note = tmp_path / "note.txt"
    note.write_text(f"строка файла {marker}\n")
    ok = client.submit(message([handle_file(str(note))]), api_name="/chat").result(timeout=120)
    assert ok["metadata"].get("message_id"), ok
    cid = ok["metadata"]["conversation_id"]
    user = history_items(stack.agent, alice, cid)[0]
    assert user["role"] == "user"
    assert f"[file note.txt]\nстрока файла {marker}" in user["content"]


def test_a_binary_file_with_nul_bytes_is_not_text(stack: Stack, tmp_path: Path) -> None:
    alice = stack.token("alice")
    client = Client(stack.gradio_url, headers={"Authorization": f"Bearer {alice}"},
                    verbose=False)
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"ABCDEF\x00\x01\x02secret-bytes" * 10)
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("café".encode("latin-1"))
    ok = client.submit(message([handle_file(str(blob)), handle_file(str(bad))]),
                       api_name="/chat").result(timeout=120)
    assert ok["metadata"].get("message_id"), ok
    user = history_items(stack.agent, alice, ok["metadata"]["conversation_id"])[0]
    assert "[file blob.bin: 210 bytes, not text]" in user["content"]
    assert "[file latin1.txt: 4 bytes, not text]" in user["content"]
    assert "secret-bytes" not in user["content"]
