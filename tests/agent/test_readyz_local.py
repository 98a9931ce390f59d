"""Readiness stays local (issue 23, item 4): `/readyz` answers from what the pod itself needs
(the database pool and the sidecar), so a model provider that hangs never takes the agent out
of the Service. The provider's state is the cached `llm-status` and a metric instead."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from testkit.stack import Stack


class _HangingEndpoint:
    """Accepts connections and never answers: the worst a provider can do to a probe."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.accepted = 0
        self.conns: list[socket.socket] = []
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.conns.append(conn)  # held open, never answered

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:
            conn.close()


@pytest.fixture
def hanging() -> Iterator[_HangingEndpoint]:
    endpoint = _HangingEndpoint()
    yield endpoint
    endpoint.close()


def test_readyz_is_200_within_a_second_while_the_model_endpoint_hangs(
        stack: Stack, hanging: _HangingEndpoint) -> None:
    agent = stack.start_agent(AGENTCHAT_AGENT_LLM="openai:stub-model",
                              AGENTCHAT_AGENT_LLM_BASE_URL=hanging.url,
                              AGENTCHAT_AGENT_LLM_API_KEY="sk-local",
                              AGENTCHAT_AGENT_TUNING__LLM_STATUS_CACHE_S="0")
    try:
        for _ in range(5):
            started = time.monotonic()
            ready = httpx.get(agent.url + "/readyz", timeout=10)
            assert time.monotonic() - started < 1.0
            assert ready.status_code == 200, ready.text
            assert ready.json()["problems"] == []
        assert hanging.accepted == 0, "readiness must not call the model endpoint"

        # The model's state is llm-status (and the metric), probed at most once a minute even
        # with the cache setting at 0.
        auth = {"Authorization": f"Bearer {stack.token('alice')}"}
        status = httpx.get(agent.url + "/api/agent/llm-status", headers=auth, timeout=30).json()
        assert status["reachable"] is False
        assert hanging.accepted == 1
        again = httpx.get(agent.url + "/api/agent/llm-status", headers=auth, timeout=30).json()
        assert again == status and hanging.accepted == 1
        metrics = httpx.get(agent.url + "/metrics", timeout=10).text
        assert "agentchat_llm_reachable 0.0" in metrics
        assert httpx.get(agent.url + "/readyz", timeout=10).status_code == 200
    finally:
        agent.stop()
