"""Foundation: packaging covers every component folder, both database paths work,
migrations are idempotent, the lock serializes, and a broken catalog is refused clearly."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tomllib
from pathlib import Path

import psycopg
import pytest

from agentchat.catalog import load_catalog
from agentchat.db import (
    CONNECTION_KWARGS,
    conversation_lock,
    embedded_url,
    migrate,
    migrate_url,
    release_conversation_lock,
    try_conversation_lock,
)
from agentchat.errors import CatalogError
from agentchat.migrations import MIGRATIONS
from agentchat.settings import PACKAGE_DATA
from testkit.support import ROOT


def test_every_package_folder_is_listed() -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    dirs = {v: k for k, v in cfg["package-dir"].items()}
    found = set()
    for top, name in dirs.items():
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            if "node_modules" in rel.parts:
                continue
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert found == listed


def test_operator_folder_never_shadows_stdlib() -> None:
    out = subprocess.run([sys.executable, "-c", "import operator, agentchat.operator as o;"
                          "print(operator.__file__); print(o.__name__)"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert "site-packages" not in out[0] or out[0].endswith("operator.py")
    assert not out[0].startswith(str(ROOT))
    assert out[1] == "agentchat.operator"


async def test_migrations_run_twice(empty_database_url: str) -> None:
    assert await migrate_url(empty_database_url) == len(MIGRATIONS)
    assert await migrate_url(empty_database_url) == 0
    async with await psycopg.AsyncConnection.connect(empty_database_url,
                                                     **CONNECTION_KWARGS) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM agentchat_migrations")
        assert (await cur.fetchone())["n"] == len(MIGRATIONS)  # type: ignore[index]


async def test_search_migration_indexes_messages_written_before_it(
        empty_database_url: str) -> None:
    """Migration 5 moves search to each conversation's vocabulary: messages stored by an older
    version are backfilled, new ones are added by its trigger whichever writer inserts them,
    and each conversation keeps a word once however many messages repeat it."""
    async with await psycopg.AsyncConnection.connect(empty_database_url,
                                                     **CONNECTION_KWARGS) as conn:
        await conn.execute("CREATE TABLE agentchat_migrations ("
                           " v integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
        for version in range(5):
            await conn.execute(MIGRATIONS[version])  # type: ignore[arg-type]
            await conn.execute("INSERT INTO agentchat_migrations (v) VALUES (%s)", (version,))
        await conn.execute("INSERT INTO conversations (id, owner) VALUES ('c1', 'ann'),"
                           " ('c2', 'bob'), ('c3', 'ann')")
        await conn.execute("INSERT INTO messages (id, conversation_id, role, content) VALUES"
                           " ('m1', 'c1', 'user', 'Отчёт по энергопотреблению'),"
                           " ('m2', 'c2', 'user', 'Отчёт по энергопотреблению')")
        assert await migrate(conn) == len(MIGRATIONS) - 5
        await conn.execute("INSERT INTO messages (id, conversation_id, role, content) VALUES"
                           " ('m3', 'c3', 'assistant', 'энергопотребление выросло'),"
                           " ('m4', 'c1', 'assistant', 'энергопотребление и отчёты снова')")

        async def found(owner: str, q: str) -> list[str]:
            cur = await conn.execute("SELECT owner_search(%s, %s) AS id ORDER BY 1", (owner, q))
            return [r["id"] for r in await cur.fetchall()]  # type: ignore[index]

        assert await found("ann", "энергопотребление") == ["c1", "c3"]
        assert await found("bob", "энергопотребление") == ["c2"]
        assert await found("eve", "энергопотребление") == []
        assert await found("ann", "отчёт -выросло") == ["c1"]
        cur = await conn.execute("SELECT count(*) AS n FROM conversation_terms"
                                 " WHERE conversation_id = 'c1' AND terms @@ owner_tsquery("
                                 "'ann', 'энергопотребление')")
        assert (await cur.fetchone())["n"] == 1  # type: ignore[index]


async def test_concurrent_migrations_do_not_collide(empty_database_url: str) -> None:
    results = await asyncio.gather(*(migrate_url(empty_database_url) for _ in range(4)))
    assert sorted(results) == [0, 0, 0, len(MIGRATIONS)]


def test_embedded_server_path(tmp_path: Path) -> None:
    """Without DATABASE_URL the service starts its own PostgreSQL under the data folder."""
    code = (
        "import asyncio, psycopg;"
        "from agentchat.db import resolve_database_url, migrate_url;"
        "from agentchat.settings import SharedSettings;"
        "u = resolve_database_url(SharedSettings());"
        "print(asyncio.run(migrate_url(u)));"
        "print(psycopg.connect(u).execute('select count(*) from conversations').fetchone()[0])"
    )
    env = {"AGENTCHAT_DATA_DIR": str(tmp_path / "d"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [str(len(MIGRATIONS)), "0"]
    assert (tmp_path / "d" / "postgres" / "PG_VERSION").exists()


async def test_conversation_lock_serializes(database_url: str) -> None:
    a = await psycopg.AsyncConnection.connect(database_url, **CONNECTION_KWARGS)
    b = await psycopg.AsyncConnection.connect(database_url, **CONNECTION_KWARGS)
    try:
        async with conversation_lock(a, "conv-1"):
            assert not await try_conversation_lock(b, "conv-1")
            assert await try_conversation_lock(b, "conv-2")
            await release_conversation_lock(b, "conv-2")
        assert await try_conversation_lock(b, "conv-1")
        await release_conversation_lock(b, "conv-1")
    finally:
        await a.close()
        await b.close()


def test_shipped_catalog_loads() -> None:
    cat = load_catalog(PACKAGE_DATA / "catalog.yaml")
    needed = {"show_capabilities", "search_dashboards", "get_health_summary", "export_config",
              "deploy_dashboard", "list_maintenance_events", "start_maintenance",
              "end_maintenance", "superset_explore_database", "list_environments",
              "get_task_status", "search_datasets", "start_migration", "delete_dashboard"}
    assert needed <= set(cat.names)
    deploy = cat.get("deploy_dashboard")
    assert deploy and deploy.needs_card("prod") and deploy.needs_card("ss-stage")
    assert not deploy.needs_card("ss-dev")
    assert any(t.risk == "destructive" for t in cat.tools)
    mig = cat.get("start_migration")
    assert mig and mig.environments_of({"source_env": "ss-dev", "target_env": "prod"}) == (
        "prod", "ss-dev")


@pytest.mark.parametrize(("edit", "expected"), [
    (("risk: write\n    confirm_in: [prod, ss-stage]", "risk: risky\n    confirm_in: [prod]"),
     "tool 'deploy_dashboard': field risk"),
    (("path: /api/dashboards/{dashboard_id}/deploy", "path: /api/dash/{dash}/deploy"),
     "tool 'deploy_dashboard'"),
    (("  - name: get_task_status", "  - name: Bad Name"), "field name"),
    (("action: export_config\n        prompt: {ru: Экспортировать конфигурацию дашборда перед",
      "action: no_such_tool\n        prompt: {ru: Экспортировать конфигурацию дашборда перед"),
     "unknown tool 'no_such_tool'"),
    (("version: 1", "version: 1\nsurprise: true"), "field surprise"),
])
def test_broken_catalog_is_refused_with_a_clear_message(tmp_path: Path, edit: tuple[str, str],
                                                        expected: str) -> None:
    text = (PACKAGE_DATA / "catalog.yaml").read_text()
    assert edit[0] in text
    broken = tmp_path / "catalog.yaml"
    broken.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(CatalogError) as e:
        load_catalog(broken)
    assert str(broken) in e.value.detail
    assert expected in e.value.detail


def test_unparseable_catalog(tmp_path: Path) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text("tools: [unclosed")
    with pytest.raises(CatalogError) as e:
        load_catalog(bad)
    assert "not valid YAML" in e.value.detail


def test_embedded_url_is_reused(tmp_path: Path) -> None:
    assert embedded_url(tmp_path) == embedded_url(tmp_path)
