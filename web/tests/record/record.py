"""Record real /chat event sequences and REST answers as vitest fixtures (web/tests/fixtures/).

Starts the real stack with the testkit (sandbox, policy sidecar, agents on a fresh database) and
runs record.mjs, which drives it with the real @gradio/client from web/node_modules. Not part of
`npm test`: the fixtures are committed, and re-recorded when the wire changes:

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \
        ../../../.venv/bin/python record.py
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
from pathlib import Path

from agentchat.db import migrate_url
from testkit.stack import catalog_with_timeouts, running_stack
from testkit.support import create_database, drop_database

HERE = Path(__file__).resolve().parent


def main() -> None:
    server = os.environ["TEST_DATABASE_URL"]
    url = create_database(server)
    try:
        asyncio.run(migrate_url(url))
        with tempfile.TemporaryDirectory() as tmp, running_stack(Path(tmp) / "data", url) as s:
            # A paced agent (cancel, join), one with a dead model (LLM_UNAVAILABLE), one whose
            # cards expire in 2 s.
            slow = s.start_agent(AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S="0.03")
            dead = s.start_agent(AGENTCHAT_AGENT_LLM="openai:gpt-4o-mini",
                                 AGENTCHAT_AGENT_LLM_BASE_URL="http://127.0.0.1:9/v1",
                                 AGENTCHAT_AGENT_LLM_API_KEY="x",
                                 AGENTCHAT_AGENT_LLM_TIMEOUT_S="3")
            short = s.start_agent(AGENTCHAT_AGENT_CONFIRMATION_TTL_S="2")
            timeouts = catalog_with_timeouts(Path(tmp), {"superset_explore_database": 1})
            timing = s.start_agent(AGENTCHAT_CATALOG_PATH=str(timeouts))
            env = {**s.node_env(), "SLOW_URL": slow.url, "DEAD_URL": dead.url,
                   "SHORT_URL": short.url, "TIMEOUT_URL": timing.url,
                   "OUT": str(HERE.parent / "fixtures")}
            subprocess.run(["node", "record.mjs"], cwd=HERE, env=env, check=True, timeout=600)
    finally:
        drop_database(server, url)


if __name__ == "__main__":
    main()
