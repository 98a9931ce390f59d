"""A catalog tool's arguments from an HTTP request, checked against the tool's JSON schema.

The calling convention the agent uses: path parameters `{x}` from the arguments; the others as
query parameters for GET and DELETE and as a JSON object body for POST, PUT and PATCH. Path and
query values arrive as strings and are coerced per the schema's type; `null` values are dropped
(an omitted optional argument). Anything else wrong is an `ArgumentsError` (422).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from fastapi import Request

from agentchat.catalog import Tool
from agentchat.errors import ErrorCode, LocalError
from agentchat.patterns import ArgumentsValidator

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
MAX_BODY_BYTES = 64 * 1024


class ArgumentsError(LocalError):
    """The request's arguments are malformed; `raw` is what arrived, kept for the audit."""

    CODE = ErrorCode.INVALID_REQUEST

    def __init__(self, detail: str, raw: dict[str, Any]) -> None:
        super().__init__(detail)
        self.raw = raw


def _coerce(value: str, schema: dict[str, Any]) -> Any:
    """A string from the URL as the schema's type; left as is when it does not parse, so the
    schema check reports it with the argument's name."""
    kind = schema.get("type")
    try:
        if kind == "integer":
            return int(value)
        if kind == "number":
            return float(value)
    except ValueError:
        return value
    if kind == "boolean" and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


class ArgumentReader:
    """Reads and validates one tool's arguments (the validator is compiled once)."""

    def __init__(self, tool: Tool) -> None:
        self.tool = tool
        self.properties: dict[str, Any] = tool.args.get("properties", {})
        self.validator = ArgumentsValidator(tool.args)  # patterns in RE2, as the agent's

    async def read(self, request: Request) -> dict[str, Any]:
        raw: dict[str, Any] = dict(request.path_params)
        if self.tool.method in BODY_METHODS:
            if request.query_params:
                raise ArgumentsError(
                    f"{self.tool.method} {self.tool.path} takes its arguments as a JSON body, "
                    f"not query parameters", {**raw, **request.query_params})
            body = await self._body(request, raw)
            for key, value in body.items():
                if key in raw and str(value) != raw[key]:
                    raise ArgumentsError(f"{key} in the body differs from the path", raw)
                raw.setdefault(key, value)
        else:
            for key in request.query_params:
                values = request.query_params.getlist(key)
                if len(values) > 1 or key in raw:
                    raise ArgumentsError(f"argument {key} given more than once", raw)
                raw[key] = values[0]
        args = {k: v for k, v in raw.items() if v is not None}
        for key in set(request.path_params) | (
                set() if self.tool.method in BODY_METHODS else set(request.query_params)):
            if key in args and isinstance(args[key], str):
                args[key] = _coerce(args[key], self.properties.get(key, {}))
        error = jsonschema.exceptions.best_match(self.validator.iter_errors(args))
        if error is not None:
            where = ".".join(str(p) for p in error.absolute_path) or "arguments"
            raise ArgumentsError(f"{self.tool.name}: {where}: {error.message}", raw)
        return args

    async def _body(self, request: Request, raw: dict[str, Any]) -> dict[str, Any]:
        data = await request.body()
        if len(data) > MAX_BODY_BYTES:
            raise ArgumentsError(f"body over {MAX_BODY_BYTES // 1024} KB", raw)
        if not data.strip():
            return {}
        try:
            body = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise ArgumentsError("the body is not valid JSON", raw) from None
        if not isinstance(body, dict):
            raise ArgumentsError("the body must be a JSON object", raw)
        return body
