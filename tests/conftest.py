"""Fixtures: a real PostgreSQL for every test, a fresh database per test, a data folder
with keys, and the dev issuer.

`TEST_DATABASE_URL` selects a running server (CI: 127.0.0.1:5432); unset, one embedded
server is started for the whole session. Each test gets its own database cloned from a
migrated template, so no state leaks between tests.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from agentchat.db import embedded_url, migrate_url
from agentchat.identity import DevUserIssuer
from agentchat.keys import KeyRing, ensure_ring
from agentchat.settings import SharedSettings
from testkit.stack import Stack, stack_on_own_database
from testkit.support import (
    Service,
    create_database,
    drop_database,
    start_openai_stub,
    stop_all,
)


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> str:
    """URL of a database on the server that the tests may use to create others."""
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        return url
    return embedded_url(tmp_path_factory.mktemp("embedded-pg"))


@pytest.fixture(scope="session")
def migrated_template(pg_server: str) -> Iterator[str]:
    """A migrated database that every test database is cloned from (named per session, so
    two test runs on one server never drop each other's template)."""
    url = create_database(pg_server)
    asyncio.run(migrate_url(url))
    yield str(psycopg.conninfo.conninfo_to_dict(url)["dbname"])
    drop_database(pg_server, url)


@pytest.fixture
def database_url(pg_server: str, migrated_template: str) -> Iterator[str]:
    """A fresh, migrated database of its own for one test."""
    url = create_database(pg_server, template=migrated_template)
    yield url
    drop_database(pg_server, url)


@pytest.fixture
def empty_database_url(pg_server: str) -> Iterator[str]:
    """A fresh database with no tables at all."""
    url = create_database(pg_server)
    yield url
    drop_database(pg_server, url)


@pytest.fixture(scope="session")
def shared_stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
                 migrated_template: str) -> Iterator[Stack]:
    """The default stack, started once per test process (each xdist worker): an agent costs
    ~2 s of CPU to start even forked from the pre-imported template (testkit/forkserver.py),
    so the modules that need no settings of their own share one. `stack` hands it to each
    module clean."""
    with stack_on_own_database(pg_server, migrated_template,
                               tmp_path_factory.mktemp("stack")) as s:
        yield s


@pytest.fixture(scope="module")
def stack(shared_stack: Stack) -> Iterator[Stack]:
    """Sandbox, policy sidecar and agent as real processes on a database of their own, shared
    by the modules of this test process: each module starts with the sandbox reset (its
    world, audit, idempotency records and faults) and its extra agents are stopped after it.
    Tests isolate themselves as before: new conversations, their own users' data."""
    shared_stack.reset_sandbox()
    base = len(shared_stack.agents)
    yield shared_stack
    stop_all(shared_stack.agents[base:])
    del shared_stack.agents[base:]
    shared_stack.reset_sandbox()


@pytest.fixture(scope="module")
def model() -> Iterator[Service]:
    """The OpenAI-compatible stub model (testkit/openai_stub.py): `script_model` says what it
    answers next; an agent reaches it with `stub_model_env(model)`."""
    svc = start_openai_stub()
    yield svc
    svc.stop()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


@pytest.fixture
def settings(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> SharedSettings:
    """Shared settings pointing at this test's data folder, with keys generated."""
    monkeypatch.setenv("AGENTCHAT_DATA_DIR", str(data_dir))
    # Unset is production; these tests use the dev issuer (and so do processes they start).
    monkeypatch.setenv("AGENTCHAT_MODE", "dev")
    s = SharedSettings()
    ensure_ring(s.keys_dir, s.jwks_path)
    return s


@pytest.fixture
def ring(settings: SharedSettings) -> KeyRing:
    return ensure_ring(settings.keys_dir, settings.jwks_path)


@pytest.fixture
def issuer(settings: SharedSettings) -> DevUserIssuer:
    return DevUserIssuer(settings)


@pytest.fixture
def service_env(settings: SharedSettings, database_url: str) -> dict[str, str]:
    """Environment for a component started as a real process in this test."""
    return {
        "AGENTCHAT_DATA_DIR": str(settings.data_dir),
        "DATABASE_URL": database_url,
        "AGENTCHAT_MODE": "dev",
    }
