"""Other teams' MCP servers in the catalog: the `upstreams` section and a tool's `upstream` pin.

An upstream is a named MCP server (Superset's first): its URL per environment, a timeout, and
how the agent authenticates to it (never with the user's token). A catalog tool with
`upstream: {server, tool, pin}` instead of `method`/`path` runs that server's tool; everything
else about the entry is ours (name, words, schema, risk, cards), so the model never reads the
server's own description.

`pin` is `sha256:` and the hex digest of the server's definition of the tool in canonical
JSON (`definition_pin`): a definition that no longer matches is quarantined (poisoning after
review, a "rug pull"). `definition` may keep the pinned definition itself, for
`agentchat mcp check` to print a drift as a diff; when present it must match the pin.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# What a pin covers: the parts of a server's tool definition a model or a caller could be
# steered by. Anything else (`_meta`, icons) may change without a quarantine.
PINNED_FIELDS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")
PIN_PREFIX = "sha256:"
# A server's name is the prefix of its tools' catalog names (`superset__list_dashboards`):
# no underscore in it, so the first `__` of a name always ends the server's part.
SERVER_NAME = r"^[a-z][a-z0-9]{1,30}$"
SEPARATOR = "__"


def pinned_definition(tool: dict[str, Any]) -> dict[str, Any]:
    """The pinned parts of a server's tool definition (the MCP `Tool` object, as JSON): absent
    or null fields left out, so a server that starts sending `"title": null` is not a drift."""
    return {k: tool[k] for k in PINNED_FIELDS if tool.get(k) is not None}


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no spaces, UTF-8: the same definition always gives the same bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def definition_pin(tool: dict[str, Any]) -> str:
    """`sha256:<hex>` of a server's tool definition (its pinned fields, canonical JSON)."""
    return PIN_PREFIX + hashlib.sha256(canonical_json(pinned_definition(tool))).hexdigest()


class UpstreamAuth(BaseModel):
    """How the agent proves itself to an upstream; the secret is never in the catalog but in
    the file named by `type` under the agent's upstream secrets folder,
    `<AGENTCHAT_AGENT_UPSTREAM_SECRETS>/<server>/`: `token` (bearer), `client_secret`
    (client_credentials), `private_key.pem` (jwt)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # none: dev and tests only (the agent refuses it outside dev mode).
    type: Literal["bearer", "client_credentials", "jwt", "none"]
    # client_credentials: the token endpoint, our client id, the scope asked for.
    token_url: str | None = None
    client_id: str | None = None
    scope: str | None = None
    # jwt: a short-lived token the agent signs per call. Superset 6.1 checks RS256 with
    # MCP_JWT_PUBLIC_KEY, its audience and issuer; `user_claim` carries the caller's id, which
    # the upstream may log (it runs every call as one account all the same).
    algorithm: Literal["RS256", "RS384", "RS512", "ES256", "ES384", "EdDSA"] = "RS256"
    audience: str | None = None
    issuer: str | None = None
    subject: str = "agentchat"
    user_claim: str = Field(default="agentchat_user", pattern=r"^[a-z][a-z0-9_]{1,63}$")
    lifetime_s: int = Field(default=300, ge=30, le=3600)

    @model_validator(mode="after")
    def _complete(self) -> UpstreamAuth:
        if self.type == "client_credentials" and not (self.token_url and self.client_id):
            raise ValueError("client_credentials needs token_url and client_id")
        if self.type == "client_credentials":
            _check_url(self.token_url or "")
        if self.type == "jwt" and not (self.audience and self.issuer):
            raise ValueError("jwt needs audience and issuer")
        return self


class Upstream(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # Its MCP endpoint per environment; a call in an environment without one is refused.
    url: dict[str, str] = Field(min_length=1)
    # Each call's whole budget, connecting included; a write is sent once, whatever happens.
    timeout_s: float = Field(default=20.0, gt=0, le=300)
    auth: UpstreamAuth

    @field_validator("url")
    @classmethod
    def _urls(cls, v: dict[str, str]) -> dict[str, str]:
        for url in v.values():
            _check_url(url)
        return v


class UpstreamTool(BaseModel):
    """A catalog tool's upstream: which server, its name there, and the pin of its definition."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    server: str = Field(pattern=SERVER_NAME)
    tool: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$")
    pin: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    definition: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _pin_matches(self) -> UpstreamTool:
        if self.definition is not None:
            if self.definition.get("name") != self.tool:
                raise ValueError("definition.name must be the upstream tool's name")
            if definition_pin(self.definition) != self.pin:
                raise ValueError("definition does not match pin")
        return self


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"{url!r}: no credentials, query or fragment in an upstream URL")


def check_upstream_tool(name: str, ref: UpstreamTool, upstreams: dict[str, Upstream],
                        environments: list[str], env_args: list[str]) -> None:
    """An upstream entry's place in the catalog (ValueError says what is wrong)."""
    if ref.server not in upstreams:
        raise ValueError(f"field upstream.server: unknown upstream {ref.server!r}")
    if not name.startswith(ref.server + SEPARATOR):
        # Namespaced by the server that runs it: a second server cannot shadow a tool.
        raise ValueError(f"an upstream tool's name must start with {ref.server + SEPARATOR!r}")
    urls = upstreams[ref.server].url
    if len(urls) > 1 and not env_args:
        raise ValueError("field environment: the upstream has a URL per environment, so the "
                         "tool needs an environment argument to pick one")
    unknown = sorted(set(urls) - set(environments))
    if unknown:
        raise ValueError(f"upstream {ref.server!r}: field url: unknown environments {unknown}")
