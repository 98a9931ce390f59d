"""Lay out `agentchat.<component>` as folders for tools that read the tree statically.

The import namespace maps folders by setuptools `package-dir` (`agent/` is `agentchat.agent`:
docs/architecture.md, "Components"), which the editable install serves through an import hook.
Type checkers and editors do not run import hooks, so this writes `.cache/src/agentchat/`: a
link per file of `agentchat/` and a link per component folder (`agent -> ../../../agent`, ...),
read from pyproject.toml. Folder links keep new modules visible without running it again; mypy
reads the tree through `mypy_path` (pyproject), an editor through its extra paths (README).

    python tools/link_tree.py        # make install runs it
"""

from __future__ import annotations

import os
import shutil
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / ".cache" / "src"


def top_level_dirs() -> dict[str, Path]:
    """`agentchat.<x>` -> its folder, for the packages mapped outside `agentchat/`."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    out = {}
    for name, folder in mapping.items():
        parts = name.split(".")
        if len(parts) == 2 and parts[0] == "agentchat":  # subpackages follow their parent
            out[parts[1]] = ROOT / folder
    return out


def main() -> None:
    pkg = TREE / "agentchat"
    shutil.rmtree(TREE, ignore_errors=True)
    pkg.mkdir(parents=True)
    for entry in (ROOT / "agentchat").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(os.path.relpath(entry, pkg))
    for name, folder in top_level_dirs().items():
        (pkg / name).symlink_to(os.path.relpath(folder, pkg))
    print(f"linked {pkg.relative_to(ROOT)}: {', '.join(sorted(top_level_dirs()))}")


if __name__ == "__main__":
    main()
