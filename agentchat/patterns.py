"""Regular expressions that come from data, in linear time: RE2 (`google-re2`), not `re`.

A catalog's JSON Schema `pattern` is applied to arguments the model wrote, and Python's `re`
backtracks: `^(a+)+$` against forty `a`s and a `!` would hold a replica for minutes. RE2 has no
backtracking (and so no back-references or look-arounds), and a pattern it cannot compile is
refused when the catalog loads, with the reason. `patternProperties` is refused too: jsonschema
applies those patterns with `re` in several keywords (`additionalProperties`,
`unevaluatedProperties`), and a tool's argument names are fixed anyway.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import jsonschema
import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is reported once, by the catalog, not on stderr


@lru_cache(maxsize=1024)
def compiled(pattern: str) -> Any:
    """The RE2 program for a pattern (cached: a catalog has few); re2.error when it has none."""
    return re2.compile(pattern, options=_OPTIONS)


def _regex(instance: object) -> bool:
    if isinstance(instance, str):
        compiled(instance)
    return True


# The metaschema's `format: regex` (a `pattern`, a `patternProperties` name) checked with RE2.
_FORMATS = jsonschema.FormatChecker(formats=())
_FORMATS.checks("regex", raises=re2.error)(_regex)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not compiled(pattern).search(instance):
        yield jsonschema.ValidationError(f"{instance[:100]!r} does not match {pattern!r}")


# Draft 2020-12 with `pattern` in RE2: what every tool call's arguments are validated with.
ArgumentsValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"pattern": _pattern})


def _keys(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _keys(value)
    elif isinstance(node, list):
        for item in node:
            yield from _keys(item)


def check_schema(schema: dict[str, Any]) -> None:
    """A Draft 2020-12 schema whose patterns RE2 runs, else ValueError saying what is wrong."""
    try:
        jsonschema.Draft202012Validator.check_schema(schema, format_checker=_FORMATS)
    except jsonschema.SchemaError as e:
        if isinstance(e.cause, re2.error):
            raise ValueError(f"pattern {e.instance!r} is not a linear-time (RE2) regular "
                             f"expression: {_reason(e.cause)}") from None
        raise ValueError(f"not a valid JSON schema: {e.message}") from None
    if "patternProperties" in _keys(schema):
        raise ValueError("patternProperties is not supported: name each argument in properties")


def _reason(error: BaseException) -> str:
    # re2.error carries RE2's own message as bytes
    arg = error.args[0] if error.args else error
    return arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)
