"""`make superset-mcp`: Superset 6.1's own MCP service behind AgentChat's gate, on this machine
(docs/upstreams.md). Not part of `make test`.

1. Superset, from its own virtualenv (.cache/superset-mcp, which make installs), on SQLite: a
   config module written once under .cache/superset-mcp/home (a generated SECRET_KEY), the
   metadata migrated, the one account its MCP service runs every call as, and the example data
   Superset 6.1's wheel carries (superset/examples/*: Parquet files and YAML dashboards, loaded
   offline by `superset load-examples`; the first run takes a quarter of an hour).
2. An RS256 key pair: Superset checks the public half (MCP_AUTH_ENABLED, MCP_JWT_PUBLIC_KEY,
   MCP_JWT_ALGORITHM, its audience and issuer); the agent signs with the private half, found
   where the chart mounts it (`<AGENTCHAT_AGENT_UPSTREAM_SECRETS>/superset/private_key.pem`).
3. `superset mcp run` on a free port, then what it checks: no token and a token for another
   audience are refused, ours lists its tools, whose definitions must match the shipped
   catalog's pins (`definition_pin`); `agentchat mcp check` and `agentchat mcp pin superset`
   say the same through the agent's own client.
4. AgentChat as `make demo` runs it (`agentchat demo`: the sandbox, the policy sidecar, the
   agent; PostgreSQL embedded, or a fresh database on TEST_DATABASE_URL's server), its catalog
   the shipped one with the commented Superset section turned on and pointed at this Superset,
   `execute_sql` too (off in the shipped catalog) to show the gate in front of it.
5. Each read tool through a chat turn (gradio_client; the offline planner picks the tool from
   the words) and through the MCP endpoint (`mcp.Client`) as a viewer, printing what came
   back; `execute_sql` refused to the viewer, carded for an admin (confirmed on the call's
   page), and its audit record: our user, although Superset ran it as its one account.
   Those calls are tools/superset_mcp_agent.py's.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from superset_mcp_agent import (
    ACCOUNT,
    ADMIN,
    CALLS,
    USER,
    audit_of,
    chat_turn,
    confirm_on_the_page,
    mcp_calls,
    say,
)

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".cache" / "superset-mcp"
HOME = VENV / "home"
CATALOG = ROOT / "agentchat" / "data" / "catalog.yaml"
AUDIENCE, ISSUER = "superset-mcp", "agentchat"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def uncommented(text: str, block: str) -> str:
    """The catalog's commented block `# BEGIN <block>` … `# END <block>`, uncommented."""
    m = re.search(rf"^# BEGIN {block}\n(.*?)^# END {block}\n", text, re.S | re.M)
    if m is None:
        raise SystemExit(f"no block {block!r} in {CATALOG}")
    return "".join(line[2:] if line.startswith("# ") else line[1:]
                   for line in m.group(1).splitlines(True))


# -- Superset --------------------------------------------------------------------------------

def superset_env() -> dict[str, str]:
    return {**os.environ, "SUPERSET_CONFIG_PATH": str(HOME / "superset_config.py"),
            "FLASK_APP": "superset", "PYTHONUNBUFFERED": "1"}


def configure() -> None:
    """The key pair and the config module, once (the SECRET_KEY must outlive a run)."""
    HOME.mkdir(parents=True, exist_ok=True)
    private = HOME / "private_key.pem"
    if not private.exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
        (HOME / "public_key.pem").write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    config = HOME / "superset_config.py"
    if not config.exists():
        config.write_text(f'''# From tools/superset_mcp.py: SQLite, the MCP service behind JWT.
SECRET_KEY = {secrets.token_urlsafe(42)!r}
SQLALCHEMY_DATABASE_URI = "sqlite:///{HOME}/superset.db"
SQLALCHEMY_EXAMPLES_URI = "sqlite:///{HOME}/examples.db"
MCP_AUTH_ENABLED = True
MCP_JWT_PUBLIC_KEY = open("{HOME}/public_key.pem").read()
MCP_JWT_ALGORITHM = "RS256"
MCP_JWT_AUDIENCE = "{AUDIENCE}"
MCP_JWT_ISSUER = "{ISSUER}"
# 6.1 runs every MCP call as this one account, whoever the token names.
MCP_DEV_USERNAME = "{ACCOUNT}"
# The tools themselves in tools/list (pinned by AgentChat), not search_tools/call_tool.
MCP_TOOL_SEARCH_CONFIG = {{"enabled": False}}
''')


def superset(*args: str) -> None:
    log = HOME / f"{args[0]}.log"
    with log.open("w") as out:
        done = subprocess.run([str(VENV / "bin" / "superset"), *args], env=superset_env(),
                              stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise SystemExit(f"superset {' '.join(args)} failed ({done.returncode}): see {log}")


def prepare() -> None:
    steps: list[tuple[str, list[str]]] = [
        ("migrated", ["db", "upgrade"]),
        ("account", ["fab", "create-admin", "--username", ACCOUNT, "--firstname", "Agent",
                     "--lastname", "Chat", "--email", "agentchat@example.com",
                     "--password", secrets.token_urlsafe(16)]),
        ("initialized", ["init"]),
        ("examples", ["load-examples"]),
    ]
    for stamp, args in steps:
        if (HOME / f".{stamp}").exists():
            continue
        started = time.monotonic()
        say(f"superset {' '.join(args[:2])} …")
        superset(*args)
        (HOME / f".{stamp}").touch()
        say(f"  done in {time.monotonic() - started:.0f} s")


@contextmanager
def process(name: str, cmd: list[str], env: dict[str, str], log: Path) -> Iterator[None]:
    """A child in its own session, stopped with its group at the end."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        yield
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        say(f"{name} stopped (log: {log.relative_to(ROOT)})")


def wait_for(what: str, probe: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{what} did not come up within {timeout:.0f} s")


def token(audience: str = AUDIENCE) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": audience, "sub": "agentchat", "iat": now, "exp": now + 300,
              "agentchat_user": "superset-mcp-script"}
    return jwt.encode(claims, (HOME / "private_key.pem").read_text(), algorithm="RS256")


async def served_tools(url: str) -> list[dict[str, Any]]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token()}"},
                                  timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as c:
            return [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                    for t in (await c.list_tools()).tools]


def check_superset(url: str) -> list[dict[str, Any]]:
    """What Superset's JWT check refuses and what it serves to us."""
    from agentchat.catalog_upstreams import definition_pin

    say("\n== Superset's MCP service: its JWT check (RS256, audience, issuer)")
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-06-18"}
    for label, auth in (("no token", None), ("a token for another audience",
                                              token("another-service"))):
        sent = {**headers, **({"Authorization": f"Bearer {auth}"} if auth else {})}
        say(f"  {label}: HTTP {httpx.post(url, json=rpc, headers=sent, timeout=30).status_code}")
    served = asyncio.run(served_tools(url))
    say(f"  our token: tools/list has {len(served)} tools: "
        + ", ".join(t["name"] for t in served))
    raw = yaml.safe_load(uncommented(CATALOG.read_text(), "superset tools"))
    by_name = {t["name"]: t for t in served}
    say("\n== The shipped catalog's pins against what this Superset 6.1 serves")
    for entry in raw:
        up = entry["upstream"]
        got = by_name.get(up["tool"])
        state = ("matches" if got and definition_pin(got) == up["pin"] else
                 f"DIFFERS: served {definition_pin(got)}" if got else "NOT SERVED")
        say(f"  {entry['name']:32} {up['pin'][:23]}…  {state}")
    return served


# -- AgentChat -------------------------------------------------------------------------------

def write_catalog(url: str) -> Path:
    """The shipped catalog with its Superset section on (execute_sql too), at this Superset
    (ss-dev)."""
    text = CATALOG.read_text()
    for block in ("superset tools", "superset execute_sql", "superset upstream"):
        text = text.replace(re.search(rf"^# BEGIN {block}\n.*?^# END {block}\n", text,
                                      re.S | re.M).group(0), uncommented(text, block))
    raw = yaml.safe_load(text)
    raw["upstreams"]["superset"]["url"] = {"ss-dev": url}
    path = HOME / "catalog.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True, sort_keys=False))
    secret = HOME / "upstream-secrets" / "superset" / "private_key.pem"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_bytes((HOME / "private_key.pem").read_bytes())
    secret.chmod(0o600)
    return path


def database_url() -> str | None:
    """DATABASE_URL as given; else a fresh database on TEST_DATABASE_URL's server; else None
    (the demo's embedded PostgreSQL)."""
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    base = os.environ.get("TEST_DATABASE_URL")
    if not base:
        return None
    import psycopg

    name = "agentchat_superset_mcp"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return urlsplit(base)._replace(path="/" + name).geturl()


def agent_env(catalog: Path) -> dict[str, str]:
    env = {**os.environ, "AGENTCHAT_MODE": "dev", "AGENTCHAT_CATALOG_PATH": str(catalog),
           "AGENTCHAT_AGENT_UPSTREAM_SECRETS": str(HOME / "upstream-secrets"),
           "AGENTCHAT_DATA_DIR": str(HOME / "agentchat")}
    url = database_url()
    if url:
        env["DATABASE_URL"] = url
    return env


def agentchat_cli(env: dict[str, str], *args: str) -> None:
    exe = str(Path(sys.executable).parent / "agentchat")
    done = subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    say(f"\n== agentchat {' '.join(args)}  (exit {done.returncode})")
    for line in (done.stdout + done.stderr).strip().splitlines()[:40]:
        say("  " + line)


def main() -> int:
    if not (VENV / "bin" / "superset").exists():
        raise SystemExit("Superset is not installed: run `make superset-mcp`")
    configure()
    prepare()
    port, agent_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    agent = f"http://127.0.0.1:{agent_port}"
    say(f"\nsuperset mcp run --port {port} (JWT: RS256, audience {AUDIENCE!r}, "
        f"issuer {ISSUER!r}; every call as {ACCOUNT!r})")
    with process("superset mcp", [str(VENV / "bin" / "superset"), "mcp", "run", "--host",
                                  "127.0.0.1", "--port", str(port)],
                 superset_env(), HOME / "mcp.log"):
        wait_for("superset mcp run", lambda: httpx.post(url, json={}, timeout=5).status_code
                 in (400, 401, 406), 180)
        check_superset(url)
        catalog = write_catalog(url)
        env = agent_env(catalog)
        agentchat_cli(env, "mcp", "check")
        agentchat_cli(env, "mcp", "pin", "superset")
        cmd = [str(Path(sys.executable).parent / "agentchat"), "demo", "--port",
               str(agent_port), "--sandbox-port", str(free_port()), "--policy-port",
               str(free_port())]
        say(f"\nagentchat demo on {agent} (catalog {catalog.relative_to(ROOT)})")
        with process("agentchat demo", cmd, env, HOME / "agentchat.log"):
            wait_for("agentchat demo", lambda: httpx.get(f"{agent}/readyz",
                                                         timeout=5).status_code == 200, 180)
            from agentchat.identity import DevUserIssuer
            from agentchat.settings import SharedSettings

            issuer = DevUserIssuer(SharedSettings(mode="dev", data_dir=HOME / "agentchat"))
            say("\n== Chat turns (the offline planner picks the tool from the words)")
            for text, _, _ in CALLS:
                chat_turn(agent, issuer.mint(USER), text)
            asyncio.run(mcp_calls(agent, {u: issuer.mint(u, extra={
                "aud": f"{agent}/api/agent/mcp"}) for u in (USER, ADMIN)}))
            confirm_on_the_page(agent, issuer.mint(ADMIN))
            audit_of(agent, issuer.mint(ADMIN))
    return 0


if __name__ == "__main__":
    sys.exit(main())
