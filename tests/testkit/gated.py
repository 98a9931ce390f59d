"""The MCP calls' door (`GatedCalls`) built in the test process against a running stack, for
the tests that drive the domain before or beside the MCP adapter: the stack on the shipped
policy (approvals.yaml: prod deploys need someone else), the door over its sidecar, sandbox
and database as agent/wiring.py builds it, and a caller as the adapter makes one.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from agentchat.agent.audit.trail import AuditTrail
from agentchat.agent.chat import Caller, GatedCalls
from agentchat.agent.chat.gated_cards import STATE_INFO, StateSeal
from agentchat.agent.gate.checks import Gate
from agentchat.agent.gate.execution import Execution
from agentchat.agent.gate.policy_client import PolicyClient
from agentchat.agent.gate.service_token import ServiceTokenProvider
from agentchat.agent.gate.tool_runtime import ToolRuntime
from agentchat.agent.settings import AgentSettings
from agentchat.agent.storage.sealing import TokenSeal
from agentchat.catalog_source import CatalogSource
from agentchat.settings import PACKAGE_DATA
from testkit.stack import CLIENT_SECRET, Stack, stack_on_own_database

PUBLIC = "https://ss.example.com"


@contextlib.contextmanager
def gated_stack(pg_server: str, template: str, tmp: Path, key: str) -> Iterator[Stack]:
    """A stack on the shipped policy, its public URL `PUBLIC`, sealing with `key`."""
    policy = tmp / "policy"
    shutil.copytree(PACKAGE_DATA / "policy", policy)  # with approvals.yaml: prod is 4 eyes
    with stack_on_own_database(pg_server, template, tmp,
                               policy_env={"AGENTCHAT_POLICY_DIR": str(policy)},
                               AGENTCHAT_AGENT_PUBLIC_URL=PUBLIC,
                               AGENTCHAT_AGENT_RESUME_KEY=key) as s:
        yield s


def make_door(stack: Stack, pool: Any, http: httpx.AsyncClient, key: str,
              **options: Any) -> GatedCalls:
    """`options`: GatedCalls' own (confirmation_ttl_s, pending_cap, tools_cache_s, ...)."""
    assert stack.sandbox is not None and stack.policy is not None
    settings = AgentSettings(data_dir=stack.data_dir, mode="dev",
                             sstools_url=stack.sandbox.url, policy_url=stack.policy.url,
                             service_token_url=stack.sandbox.url + "/api/auth/service-token",
                             service_client_secret=CLIENT_SECRET)
    catalogs = CatalogSource(settings.catalog_path)
    tokens = ServiceTokenProvider(settings, http)
    return GatedCalls(
        pool=pool,
        gate=Gate(PolicyClient(url=stack.policy.url, timeout_s=5.0, tokens=tokens)),
        execution=Execution(ToolRuntime(base_url=stack.sandbox.url, tokens=tokens, http=http)),
        catalogs=catalogs, audit=AuditTrail(db=pool, catalogs=catalogs),
        states=StateSeal(TokenSeal.of(key, info=STATE_INFO)), public_url=PUBLIC,
        **{"confirmation_ttl_s": 300.0, **options})


def caller(stack: Stack, user: str, roles: list[str]) -> Caller:
    return Caller(sub=user, user_jwt=stack.token(user, roles), azp="claude-code",
                  client_name="claude-code", client_version="2.1.0", lang="en")
