"""The tests' services are forks of a pre-imported template (tests/testkit/forkserver.py): each
must still be its own process, with its own environment, log, exit code and process group,
as when the console script starts it."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import httpx

from testkit.forkserver import Forked
from testkit.support import Service, free_port


def sandbox(tmp: Path, secret: str, **env: str) -> Service:
    port = free_port()
    return Service(["sandbox", "--port", str(port)], port=port, log=tmp / f"{secret}.log",
                   env={"AGENTCHAT_DATA_DIR": str(tmp / secret), "AGENTCHAT_MODE": "dev",
                        "AGENTCHAT_SANDBOX_CLIENT_SECRET": secret, **env})


def token_status(svc: Service, secret: str) -> int:
    return httpx.post(svc.url + "/api/auth/service-token", timeout=5,
                      json={"client_id": "agentchat-agent", "client_secret": secret}).status_code


def test_forked_services_keep_their_own_environment_signals_and_exit_codes(
        tmp_path: Path) -> None:
    with sandbox(tmp_path, "first") as a, sandbox(tmp_path, "second") as b:
        assert isinstance(a.proc, Forked) and isinstance(b.proc, Forked)
        assert a.proc.pid != b.proc.pid
        # Each reads its own secret: the template's environment is not theirs.
        assert token_status(a, "first") == 200 and token_status(a, "second") != 200
        assert token_status(b, "second") == 200 and token_status(b, "first") != 200
        b.kill()
        assert b.proc.returncode == -signal.SIGKILL
        assert token_status(a, "first") == 200  # a sibling's death is not a's
        a.stop()
    # SIGTERM: uvicorn shuts down, then dies of the signal it caught, as the console script does
    with sandbox(tmp_path, "plain", GRADIO_ANALYTICS_ENABLED="maybe") as plain:
        assert isinstance(plain.proc, subprocess.Popen)  # read on import: not forked
        assert token_status(plain, "plain") == 200
    assert a.proc.returncode == plain.proc.returncode == -signal.SIGTERM
    # A refusal reaches the log and the exit code, as from the console script.
    bad = Service(["sandbox", "--port", "not-a-port"], env={}, port=free_port(),
                  log=tmp_path / "bad.log")
    try:
        bad.start(timeout=20)
    except RuntimeError as e:
        assert "exited with 2" in str(e)
    else:
        raise AssertionError("a service with a bad argument started")
    assert "invalid int value" in (tmp_path / "bad.log").read_text()

