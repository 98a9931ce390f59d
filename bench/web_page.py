"""The panel page (web/, served at /api/agent/ui/) against the Gradio Blocks page at the mount
path, in the same run, same agent, same Chromium (bench/web_page.mjs):

- the JavaScript and CSS each page loads, raw and gzip; goal: the panel at most a fifth of the
  Gradio page's gzip bytes;
- time to interactive (navigation start to the message box enabled and connected), median of
  RUNS cold loads each, alternating; goal: the panel faster;
- main-thread time (Chromium's TaskDuration) while a 200-token answer streams at 30 tokens/s
  (the planner paced at 1/30 s per token), the median of STREAMS answers per page; goal: under
  10 % of the stream's duration.

The page must be built (`make web`). Prints one JSON object on its last line.

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/web_page.py [--runs 5] [--streams 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from typing import Any

from common import ROOT, bench_env


def browser_run(env: dict[str, str]) -> dict[str, Any]:
    node = shutil.which("node")
    assert node, "Node 20 is required"
    out = subprocess.run([node, str(ROOT / "bench" / "web_page.mjs")], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise RuntimeError(f"web_page.mjs failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--streams", type=int, default=3)
    parser.add_argument("--token-delay", type=float, default=1 / 30)
    opts = parser.parse_args()
    if not (ROOT / "web" / "build" / "index.html").is_file():
        raise SystemExit("the page is not built: run `make web`")
    with bench_env("web-page", AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S=str(opts.token_delay),
                   AGENTCHAT_AGENT_TUNING__SELECTION_EMBEDDINGS="none") as (stack, _):
        found = browser_run({"AGENT_URL": stack.agent.url, "TOKEN_ALICE": stack.token("alice"),
                             "RUNS": str(opts.runs), "STREAMS": str(opts.streams)})
    panel, gradio = found["panel"], found["gradio"]
    gz = {name: page["bytes"]["js_gzip"] + page["bytes"]["css_gzip"]
          for name, page in found.items()}
    ratio = round(gz["panel"] / gz["gradio"], 4)
    goals = {"bytes_at_most_a_fifth": ratio <= 0.2,
             "faster_to_interactive": panel["tti_ms"] < gradio["tti_ms"],
             "stream_main_thread_under_10pct": panel["stream"]["main_thread_share"] < 0.10}
    print(json.dumps({"bench": "web_page", "runs": opts.runs, "streams": opts.streams,
                      "token_delay_s": round(opts.token_delay, 4), "panel": panel,
                      "gradio_baseline": gradio, "gzip_bytes": gz, "gzip_ratio": ratio,
                      "tti_ratio": round(panel["tti_ms"] / gradio["tti_ms"], 3),
                      "goals": goals}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
