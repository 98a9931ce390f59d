"""Gradio's upload folder has a volume of its own (issue 31, hole 3): not the shared `/tmp` the
data dir and the sidecar use, with a size limit the agent's replica-wide upload cap stays under."""

from __future__ import annotations

from typing import Any

import pytest

from agentchat.agent.settings import AgentSettings
from testkit.chart import HelmError, matrix, one, render

DEFAULT = matrix()["default"]


def agent_pod(sets: dict[str, Any] | None = None) -> dict[str, Any]:
    docs = render(DEFAULT, sets)
    pod: dict[str, Any] = one(docs, "Deployment", "-agent")["spec"]["template"]["spec"]
    return pod


def uploads(pod: dict[str, Any]) -> tuple[dict[str, str], str, dict[str, Any]]:
    """The agent's env, where its upload volume is mounted, and the volume."""
    agent = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in agent["env"]}
    mount = next(m["mountPath"] for m in agent["volumeMounts"] if m["name"] == "uploads")
    volume = next(v for v in pod["volumes"] if v["name"] == "uploads")
    return env, mount, volume


def test_uploads_get_their_own_volume_and_the_cap_under_it() -> None:
    pod = agent_pod()
    env, mount, volume = uploads(pod)
    assert volume == {"name": "uploads", "emptyDir": {"sizeLimit": "64Mi"}}
    assert env["GRADIO_TEMP_DIR"] == mount and not mount.startswith("/tmp")
    # ¾ of the volume: the agent's own default, so a chart and a bare process agree.
    assert env["AGENTCHAT_AGENT_UPLOAD_BYTES_PER_REPLICA"] == str(48 << 20)
    assert AgentSettings.model_fields["upload_bytes_per_replica"].default == 48 << 20
    others = [*pod.get("initContainers", []), *pod["containers"][1:]]
    assert all(m["name"] != "uploads" for c in others for m in c.get("volumeMounts", [])), (
        "the sidecar never sees the uploads")


def test_the_cap_follows_the_size_limit_unless_extra_config_names_it() -> None:
    env, _, volume = uploads(agent_pod({"agent.uploads.sizeLimit": "1Gi"}))
    assert volume["emptyDir"] == {"sizeLimit": "1Gi"}
    assert env["AGENTCHAT_AGENT_UPLOAD_BYTES_PER_REPLICA"] == str(768 << 20)
    env, _, _ = uploads(agent_pod({
        "extraConfig.AGENTCHAT_AGENT_UPLOAD_BYTES_PER_REPLICA": "1000"}))
    assert "AGENTCHAT_AGENT_UPLOAD_BYTES_PER_REPLICA" not in env, "the ConfigMap's wins"


def test_values_of_a_release_before_it_still_render() -> None:
    """`helm upgrade --reuse-values` from a release whose values had no `agent.uploads`."""
    env, _, volume = uploads(agent_pod({"agent.uploads": None}))
    assert volume["emptyDir"] == {"sizeLimit": "64Mi"}
    assert env["AGENTCHAT_AGENT_UPLOAD_BYTES_PER_REPLICA"] == str(48 << 20)


def test_a_size_limit_the_cap_cannot_read_is_refused() -> None:
    with pytest.raises(HelmError, match=r"/agent/uploads/sizeLimit"):
        render(DEFAULT, {"agent.uploads.sizeLimit": "64MB"})
