"""Cost of the policy sidecar's exec probe, the one the chart renders (python + urllib over
loopback), against the baseline of starting the same interpreter doing nothing, in one run.

The sidecar listens on 127.0.0.1, which the kubelet's httpGet cannot reach, so its probes fork
a Python process; this tells whether the probe periods in values.yaml are cheap enough.
Prints one JSON object on its last line.
"""

from __future__ import annotations

import http.server
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from testkit.chart import matrix, one, render

ROOT = Path(__file__).resolve().parent.parent

RUNS = 30


class _Livez(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def _time(command: list[str]) -> list[float]:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    pod = one(render(matrix()["default"]), "Deployment", "-agent")["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["initContainers"] if c["name"] == "policy")
    probe = sidecar["livenessProbe"]["exec"]["command"]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Livez)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    probe = [sys.executable if probe[0] == "python" else probe[0], *probe[1:-1],
             probe[-1].replace(":8181/", f":{port}/")]
    baseline = _time([sys.executable, "-c", "pass"])
    measured = _time(probe)
    server.shutdown()
    periods = {name: pod_probe["periodSeconds"] for name, pod_probe in
               (("startup", sidecar["startupProbe"]), ("liveness", sidecar["livenessProbe"]),
                ("readiness", sidecar["readinessProbe"]))}
    steady_ms_per_s = statistics.median(measured) * (1 / periods["liveness"] +
                                                     1 / periods["readiness"])
    print(yaml.safe_dump({"probe_command": probe[-1]}).strip())
    print(json.dumps({
        "bench": "chart_sidecar_exec_probe",
        "runs": RUNS,
        "baseline_python_pass_ms_p50": round(statistics.median(baseline), 1),
        "probe_ms_p50": round(statistics.median(measured), 1),
        "probe_ms_max": round(max(measured), 1),
        "probe_over_baseline": round(statistics.median(measured) / statistics.median(baseline), 2),
        "probe_periods_s": periods,
        "steady_state_probe_ms_per_s": round(steady_ms_per_s, 2),
    }))


if __name__ == "__main__":
    main()
