"""Settings every component shares.

Each component's settings class extends :class:`SharedSettings` (one class per component,
instantiated once at its entry point). Values come from the environment; the README lists them.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PACKAGE_DATA = Path(__file__).resolve().parent / "data"


class SharedSettings(BaseSettings):
    """Database, data folder, identities and the tool catalog."""

    model_config = SettingsConfigDict(env_prefix="AGENTCHAT_", extra="ignore",
                                      populate_by_name=True)

    # Unset: an embedded PostgreSQL is started under data_dir (see agentchat.db).
    database_url: str | None = Field(default=None, validation_alias="DATABASE_URL")
    data_dir: Path = Path(".data")
    # "dev" enables the demo issuer, placeholder secrets and the sandbox; "production" refuses them.
    # Unset is production (fail closed): `make demo`, the tests and the dev chart profile say
    # "dev" explicitly, so a deployment that forgets the variable never gets the dev shortcuts.
    mode: Literal["dev", "production"] = "production"

    catalog_path: Path = PACKAGE_DATA / "catalog.yaml"

    # Service tokens (ours): EdDSA keys with next/current/previous stages, PROTOCOL §8.
    service_issuer: str = "agentchat"
    service_audience: str = "ss-tools"
    service_token_lifetime_s: int = 900
    # Private signing keys (written by the operator in a cluster, generated locally in dev).
    service_keys_dir: Path | None = None
    # The public JWKS the verifiers read; re-read when the file changes.
    service_jwks_path: Path | None = None

    # User tokens (ss-tools'): issuer, audience, algorithms and key set are configurable.
    user_issuer: str = "ss-tools"
    user_audience: str = "agentchat"
    user_algorithms: list[str] = ["RS256"]
    user_jwks_path: Path | None = None
    roles_claim: str = "roles"

    jwt_leeway_s: int = 30

    @cached_property
    def keys_dir(self) -> Path:
        return self.service_keys_dir or (self.data_dir / "keys")

    @cached_property
    def jwks_path(self) -> Path:
        return self.service_jwks_path or (self.keys_dir / "jwks.json")

    @cached_property
    def user_jwks(self) -> Path:
        return self.user_jwks_path or (self.data_dir / "dev-issuer" / "jwks.json")

    @property
    def is_dev(self) -> bool:
        return self.mode == "dev"
