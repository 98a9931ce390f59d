"""Make sure `promtool` is here (the chart's alert rules are checked with it); print its path.

promtool comes from Debian's `prometheus` package (only package registries are reachable here).
The package is downloaded with `apt-get download` and unpacked with `dpkg-deb -x` into .cache/:
no root, nothing installed system-wide, and no Prometheus server started by the package's
maintainer scripts (a full install would start one on port 9090). A promtool already on PATH
is used as it is. Idempotent: a cached, runnable binary is reused without touching the network.
Fails (exit 1) when it cannot get one: the chart test needs it and never skips.

    python tools/ensure_promtool.py          # prints .cache/bin/promtool
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE = "prometheus"
ROOT = Path(__file__).resolve().parent.parent
PROMTOOL = ROOT / ".cache" / "bin" / "promtool"


def _say(text: str) -> None:
    print(f"ensure_promtool: {text}", file=sys.stderr, flush=True)


def _version(path: Path | str) -> str | None:
    try:
        done = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout or done.stderr).splitlines()[0] if done.returncode == 0 else None


def _run(*cmd: str, cwd: Path) -> bool:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False,
                          env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if done.returncode != 0:
        _say(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[-1000:]}")
    return done.returncode == 0


def _fetch() -> bool:
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        _say("no apt-get/dpkg-deb on this machine")
        return False
    with tempfile.TemporaryDirectory(prefix="promtool-") as tmp:
        work = Path(tmp)
        # A fresh machine has no package lists (apt-get update needs root).
        if not _run("apt-get", "download", PACKAGE, cwd=work) and not (
                os.geteuid() == 0 and _run("apt-get", "update", cwd=work)
                and _run("apt-get", "download", PACKAGE, cwd=work)):
            return False
        [deb] = sorted(work.glob(f"{PACKAGE}_*.deb"))
        if not _run("dpkg-deb", "-x", str(deb), str(work / "root"), cwd=work):
            return False
        PROMTOOL.parent.mkdir(parents=True, exist_ok=True)
        staged = PROMTOOL.with_suffix(".part")
        shutil.copy2(work / "root" / "usr" / "bin" / "promtool", staged)
        staged.chmod(0o755)
        staged.replace(PROMTOOL)
        _say(f"unpacked {deb.name}")
    return True


def main() -> int:
    if _version(PROMTOOL):
        print(PROMTOOL)
        return 0
    on_path = shutil.which("promtool")
    if on_path and _version(on_path):
        print(on_path)
        return 0
    if _fetch() and _version(PROMTOOL):
        _say(f"ready: {_version(PROMTOOL)}")
        print(PROMTOOL)
        return 0
    _say("FAIL: no promtool (Debian's prometheus package could not be fetched)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
