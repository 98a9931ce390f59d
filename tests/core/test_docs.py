"""The README documents what a platform engineer needs: the two-command quick start and
every setting of every component."""

from __future__ import annotations

import re

import pytest
from pydantic_settings import BaseSettings

from agentchat.agent.settings import AgentSettings
from agentchat.operator.settings import OperatorSettings
from agentchat.policy.settings import PolicySettings
from agentchat.sandbox.settings import SandboxSettings
from agentchat.settings import SharedSettings
from testkit.support import ROOT

README = (ROOT / "README.md").read_text()


def env_names(cls: type[BaseSettings]) -> list[str]:
    prefix = cls.model_config.get("env_prefix", "")
    out = []
    for name, field in cls.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, str):
            out.append(alias.upper())
        elif alias is not None and hasattr(alias, "choices"):
            out.append(str(alias.choices[0]).upper())
        else:
            out.append((prefix + name).upper())
    return out


def test_quick_start_is_exactly_two_commands() -> None:
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block and block.group(1).split("\n")[:-1] == ["make demo", "make test"]


@pytest.mark.parametrize("cls", [SharedSettings, AgentSettings, PolicySettings, SandboxSettings,
                                 OperatorSettings])
def test_every_setting_is_documented(cls: type[BaseSettings]) -> None:
    missing = [n for n in env_names(cls) if f"`{n}`" not in README]
    assert not missing, f"README lacks {missing}"
