"""Each package's `__init__.py` docstring lists its folder: every module (`*.py`) and
subpackage (`*/`) in it, and no bare module name that is not there (a file of another folder
is named with its folder: `agent/chat/facade.py`)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMED = re.compile(r"(?<![\w/.-])(\w+)\.py\b")


def package_folders() -> list[Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return sorted(ROOT / f for f in config["tool"]["setuptools"]["package-dir"].values())


def mismatches(folder: Path, docstring: str) -> list[str]:
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__", "__main__"}
    subpackages = {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
    named = set(NAMED.findall(docstring))
    out = [f"{m}.py not listed" for m in sorted(modules - named)]
    out += [f"{s}/ not listed" for s in sorted(subpackages)
            if not re.search(rf"(?<![\w/.-]){s}/", docstring)]
    out += [f"{n}.py listed, absent" for n in sorted(named - modules - {"__init__", "__main__"})]
    return out


@pytest.mark.parametrize("folder", package_folders(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_package_docstring_lists_its_folder(folder: Path) -> None:
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    assert mismatches(folder, doc) == []


def test_the_check_sees_a_missing_and_a_stale_module(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "kept.py").write_text("")
    (tmp_path / "new.py").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "__init__.py").write_text("")
    doc = "kept.py does this, sub/ that; gone.py is gone; agent/chat/facade.py is elsewhere"
    assert mismatches(tmp_path, doc) == ["new.py not listed", "gone.py listed, absent"]
    assert mismatches(tmp_path, "kept.py, new.py and sub/") == []
