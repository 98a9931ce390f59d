"""One error tree: every exception class the product defines is an `AgentChatError` (or a
signal registered in `agentchat.errors.SIGNALS`), and `agentchat/errors.py`'s docstring draws
exactly that tree: each class under its real base, each in the module it names.

The classes are found by importing every product module (each component's folder, mapped to
`agentchat.<component>` by pyproject's package-dir) and keeping the exception classes defined
there, so a new one anywhere in the product is seen without being listed here.
"""

from __future__ import annotations

import importlib
import inspect
import re
import tomllib

import pytest

import agentchat.errors as errors
from agentchat.errors import AgentChatError
from testkit.support import ROOT

# Leaf lines of the drawing: "├── Name   path/to/module.py: what" (the root has no branch).
LINE = re.compile(r"^(?P<indent>[ │]*)(?:├── |└── )(?P<name>\w+)\s+(?:(?P<path>[\w/]+\.py):)?")


def product_modules() -> list[str]:
    mapping: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())[
        "tool"]["setuptools"]["package-dir"]
    names = set()
    for package, folder in mapping.items():
        for path in (ROOT / folder).glob("*.py"):
            if path.stem != "__main__":  # running it is its import
                names.add(package if path.stem == "__init__" else f"{package}.{path.stem}")
    return sorted(names)


COMPONENTS = {"agent", "policy", "operator", "sandbox"}


def module_path(module: str) -> str:
    """`agentchat.agent.main` -> `agent/main.py`, the way the drawing names files."""
    parts = module.split(".")
    return "/".join(parts[1:] if parts[1] in COMPONENTS else parts) + ".py"


def product_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in product_modules():
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == name:
                found[f"{name}.{value.__qualname__}"] = value
    return found


def drawing() -> dict[str, tuple[str, str | None]]:
    """Class name -> (its parent in the drawing, the file it is said to live in)."""
    doc = errors.__doc__ or ""
    lines = doc[doc.index("    AgentChatError"):].splitlines()
    out: dict[str, tuple[str, str | None]] = {}
    stack = ["AgentChatError"]  # stack[d]: the last class drawn at depth d
    for line in lines[1:]:
        m = LINE.match(line[4:])
        if m is None:
            break
        depth = len(m["indent"]) // 4 + 1
        del stack[depth:]
        out[m["name"]] = (stack[-1], m["path"])
        stack.append(m["name"])
    return out


def test_every_product_exception_is_in_the_tree_or_a_registered_signal() -> None:
    outside = sorted(q for q, cls in product_exceptions().items()
                     if not issubclass(cls, AgentChatError) and q not in errors.SIGNALS)
    assert outside == [], "make these LocalError subclasses (or register a signal)"


def test_the_signals_registered_exist_and_stay_outside_the_tree() -> None:
    found = product_exceptions()
    for qualified, why in errors.SIGNALS.items():
        assert qualified in found, qualified
        assert not issubclass(found[qualified], AgentChatError), qualified
        assert why


def test_the_docstring_draws_the_tree_as_it_is() -> None:
    drawn = drawing()
    assert len(drawn) > 20, "the drawing was not read"
    in_tree = {cls.__name__: cls for cls in product_exceptions().values()
               if issubclass(cls, AgentChatError) and cls is not AgentChatError}
    assert sorted(drawn) == sorted(in_tree)
    for name, (parent, path) in drawn.items():
        cls = in_tree[name]
        assert parent in {base.__name__ for base in cls.__bases__}, (name, parent)
        assert path is None or path == module_path(cls.__module__), (name, path)


@pytest.mark.parametrize(("line", "name", "depth"), [
    ("├── TokenError                 a JWT", "TokenError", 1),
    ("    │   └── Conflict           operator/kube.py: x", "Conflict", 3),
])
def test_the_drawing_reader(line: str, name: str, depth: int) -> None:
    m = LINE.match(line)
    assert m is not None and m["name"] == name
    assert len(m["indent"]) // 4 + 1 == depth
