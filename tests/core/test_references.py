"""No reference to something the repository does not hold (issue 32): a file path, a section
of our docs, or a document that lives elsewhere.

In every tracked source and document:
- a path of code or a document (`agent/chat/facade.py`, `docs/ux.md`), from the root or from
  the folder of the file that names it, or of the agent's subpackages written short
  (`chat/facade.py`), names a file that exists;
- a bare file name of code or a document (`facade.py`, `machine.ts`, `README_rest.md`) in a
  document, a docstring or a comment names a file that exists somewhere in the repository;
- `docs/architecture.md, "Section"` and `docs/ux.md, "Section"` name a heading of that page,
  and `protocol.md §N` a numbered section of docs/protocol.md;
- nothing cites the ss-tools seed documents (`000_…`, `002_…`, `003_…`) or an ARCHITECTURE
  page: their content that the code relies on is in docs/ (protocol.md, ux.md, architecture.md).
"""

from __future__ import annotations

import io
import re
import subprocess
import tokenize
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = (".py", ".md", ".mjs", ".ts", ".svelte", ".yaml", ".yml", ".tpl", ".txt", ".toml")
# Code and documents; a policy folder's or a chart's YAML is named relative to that folder.
EXT = r"(?:py|md|mjs|ts|svelte|json|toml)"
TOP = r"(?:agent|agentchat|policy|operator|sandbox|charts|docs|tests|bench|tools|web)"
FULL = re.compile(rf"(?<![\w/.-]){TOP}/[\w./-]*\w\.{EXT}(?![\w/])")
SHORT = re.compile(r"(?<![\w/.-])(?:api|chat|gradio|graph|selection|audit|storage)/[\w/]*\w\.py\b")
SECTION = re.compile(r"docs/(architecture|ux|reliability)\.md, \"([^\"]+)\"")
PROTOCOL = re.compile(r"protocol\.md §(\d+)")
# A file name with no folder: code or a document, not data (`config.json` is a runtime name);
# a one-letter stem is a placeholder (`x.ts`).
BARE = re.compile(r"(?<![\w/.-])[\w-]{2,}\.(?:py|ts|mjs|svelte|md)\b(?![\w/(]|\.\w)")
ELSEWHERE = re.compile(r"(?<![\w])00[0-3]_(?:…|\.\.\.|[0-9a-f]{8})|\bARCHITECTURE\b|seeds/")


def tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    return [ROOT / f for f in out if f.endswith(SUFFIXES) and "node_modules" not in f
            and (ROOT / f).is_file()]


@cache
def file_names() -> frozenset[str]:
    """The name of every file in the repository, tracked or new (not ignored)."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return frozenset(Path(f).name for f in out)


def prose(path: Path, text: str) -> str:
    """What people read: a document whole; a module's docstrings and comments."""
    if path.suffix == ".py":
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
        except (tokenize.TokenError, SyntaxError):
            return text
        return "\n".join(t.string for t in tokens if t.type == tokenize.COMMENT or (
            t.type == tokenize.STRING and t.string.lstrip("rbuRBU").startswith(('"""', "'''"))))
    if path.suffix in (".ts", ".mjs", ".svelte"):
        return "\n".join(re.findall(r"//[^\n]*|/\*.*?\*/|<!--.*?-->", text, re.S))
    return text if path.suffix == ".md" else ""


def headings(doc: str) -> set[str]:
    text = (ROOT / "docs" / f"{doc}.md").read_text()
    return {line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")}


def protocol_sections() -> set[str]:
    text = (ROOT / "docs" / "protocol.md").read_text()
    return set(re.findall(r"^## (\d+)\.", text, re.M))


def dangling(path: Path, text: str) -> list[str]:
    found = []
    flat = re.sub(r"\s*\n\s*(?:#|//|\*|<!--)?\s*", " ", text)  # a reference cut by a line end
    bases = [ROOT, *(p for p in path.parents if ROOT in (p, *p.parents))]
    for m in FULL.finditer(text):
        if not any((base / m.group(0)).exists() for base in bases):
            found.append(m.group(0))
    for m in SHORT.finditer(text):
        if not (ROOT / "agent" / m.group(0)).exists():
            found.append(m.group(0))
    for doc, section in SECTION.findall(flat):
        if section not in headings(doc):
            found.append(f'docs/{doc}.md, "{section}"')
    sections = protocol_sections()
    found += [f"protocol.md §{n}" for n in PROTOCOL.findall(text) if n not in sections]
    found += [m.group(0) for m in ELSEWHERE.finditer(text)]
    found += [m.group(0) for m in BARE.finditer(prose(path, text))
              if m.group(0) not in file_names()]
    return found


def test_no_reference_dangles() -> None:
    this = Path(__file__).resolve()
    problems = {str(p.relative_to(ROOT)): d for p in tracked() if p != this
                if (d := dangling(p, p.read_text(errors="replace")))}
    assert problems == {}


@pytest.mark.parametrize(("text", "expected"), [
    ("see agent/chat/service.py", ["agent/chat/service.py"]),
    ("see chat/stream.py", ["chat/stream.py"]),
    ('docs/architecture.md, "Streaming at\n   scale" and protocol.md §99', ["protocol.md §99"]),
    ('docs/architecture.md, "Nowhere"', ['docs/architecture.md, "Nowhere"']),
    ("as `002_…` says; ARCHITECTURE", ["002_…", "ARCHITECTURE"]),
    ("agent/chat/facade.py, chat/facade.py, docs/ux.md, protocol.md §4", []),
    ("`limits.py` holds the body limit; heap.py, machine.ts and README_rest.md stay",
     ["limits.py"]),
    ("the old `page_csp.py`, `gone.ts`; chat.svelte.ts and config.json are fine",
     ["page_csp.py", "gone.ts"]),
])
def test_the_check_finds_what_dangles(text: str, expected: list[str]) -> None:
    assert dangling(ROOT / "x.md", text) == expected


def test_a_module_names_files_in_its_docstrings_and_comments_only() -> None:
    """In code, only what people read counts: a string the code uses is no reference."""
    code = '"""Reads `gone.py`."""\n# and `gone.ts`\nPROBE = "probe.py"\n'
    assert dangling(ROOT / "x.py", code) == ["gone.py", "gone.ts"]
