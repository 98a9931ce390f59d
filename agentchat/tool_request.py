"""One request builder: a tool call's arguments, validated, become exactly one ss-tools request.

    model's tool call ──▶ validate_arguments (the tool's JSON Schema, Draft 2020-12, no coercion,
                          environment arguments present and known)
                      ──▶ the policy sidecar checks (tool, environment, these arguments)
                      ──▶ build_request: each path parameter one percent-encoded segment
                      ──▶ the HTTP call

The agent validates before asking the sidecar, the sidecar validates again (defence in depth),
and the request is built from the same validated arguments, so what the gate checked is what
runs: a `dataset_id` of `"../dashboards/5/deploy#"` cannot turn a refresh into a deploy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import jsonschema

from agentchat.catalog import Tool
from agentchat.errors import ErrorCode, LocalError
from agentchat.patterns import ArgumentsValidator

# Refused in a path segment even when the schema would admit it: anything that could leave
# the segment or be decoded into something else on the way.
_UNSAFE_SEGMENT = re.compile(r"[/\\?#%\x00-\x1f\x7f]")
_MAX_ERRORS = 3


class InvalidArguments(LocalError, ValueError):
    """A tool call whose arguments cannot be sent; the message says why, for the model."""

    CODE = ErrorCode.INVALID_REQUEST


@dataclass(frozen=True)
class ToolRequest:
    method: str
    path: str  # already encoded: one segment per path parameter
    params: dict[str, Any]
    body: dict[str, Any] | None


def _validator(tool: Tool) -> jsonschema.protocols.Validator:
    # Built once per tool object (the catalog is immutable once loaded); its `pattern`s run in
    # RE2, linear in the model's text (agentchat/patterns.py).
    cached = _VALIDATORS.get(id(tool))
    if cached is None or cached[0] is not tool:
        cached = (tool, ArgumentsValidator(tool.args))
        _VALIDATORS[id(tool)] = cached
    return cached[1]


_VALIDATORS: dict[int, tuple[Tool, jsonschema.protocols.Validator]] = {}


def validate_arguments(tool: Tool, arguments: Any) -> dict[str, Any]:
    """The arguments if they fit the tool's schema exactly; else InvalidArguments.

    Unknown keys are refused unless the schema explicitly allows them, types are never coerced
    (`"5"` is not an integer, `true` is not one either), and a tool that names an environment
    argument must get one on every call.
    """
    if not isinstance(arguments, dict):
        raise InvalidArguments("the arguments must be a JSON object")
    props = tool.args.get("properties", {})
    if tool.args.get("additionalProperties") in (None, False):
        extra = sorted(k for k in arguments if k not in props)
        if extra:
            raise InvalidArguments(f"unknown argument(s) for {tool.name}: {', '.join(extra)}")
    errors = sorted(_validator(tool).iter_errors(arguments), key=lambda e: list(e.path))
    if errors:
        raise InvalidArguments("; ".join(_describe(e) for e in errors[:_MAX_ERRORS]))
    if tool.environment is not None:
        for name in (tool.environment.argument, tool.environment.source_argument):
            if name is not None and name not in arguments:
                raise InvalidArguments(f"{tool.name} needs its environment argument {name!r}")
    for name in tool.path_params():
        _segment(name, arguments.get(name))
    return arguments


def _describe(err: jsonschema.ValidationError) -> str:
    where = ".".join(str(p) for p in err.absolute_path) or "arguments"
    return f"{where}: {err.message[:200]}"


def _segment(name: str, value: Any) -> str:
    """One path segment from a validated value, or InvalidArguments."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidArguments(f"path parameter {name!r} must be an integer or a string")
    text = str(value)
    if not text or text in (".", "..") or _UNSAFE_SEGMENT.search(text):
        raise InvalidArguments(f"path parameter {name!r} is not a plain identifier")
    return quote(text, safe="")


def build_request(tool: Tool, arguments: Any) -> ToolRequest:
    """The ss-tools request for a call; validates first, so nothing unvalidated is sent."""
    args = validate_arguments(tool, arguments)
    if tool.method is None or tool.path is None:
        raise InvalidArguments(f"{tool.name} is not an ss-tools tool")  # an upstream's
    path, rest = tool.path, dict(args)
    for name in tool.path_params():
        path = path.replace("{" + name + "}", _segment(name, rest.pop(name)))
    if tool.method in ("GET", "DELETE"):
        return ToolRequest(tool.method, path, {k: v for k, v in rest.items() if v is not None},
                           None)
    return ToolRequest(tool.method, path, {}, rest)
