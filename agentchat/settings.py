"""Settings every component shares, and the one naming convention of their variables.

Each component's settings class extends :class:`SharedSettings` (one class per component,
instantiated once at its entry point). Values come from the environment:

- a shared setting (declared here) is ``AGENTCHAT_<NAME>`` (plus ``DATABASE_URL``);
- a component's own setting is ``AGENTCHAT_<COMPONENT>_<NAME>``: ``AGENTCHAT_AGENT_LEASE_S``,
  ``AGENTCHAT_POLICY_DIR``, ``AGENTCHAT_OPERATOR_TICK_S``, ``AGENTCHAT_SANDBOX_PORT``. The
  component is the package that declares the field (``agentchat.agent.*`` is the agent, the
  tool-selection settings included); a field already named after its component
  (``policy_dir``) is not prefixed twice. Keyword arguments use the field names.

The agent's variables were ``AGENTCHAT_<NAME>`` until the convention: those names
(:data:`RENAMED_ENV`) still work, with a warning naming the new one, and lose to the new name
when both are set. :func:`report_unknown_env` warns at start about an ``AGENTCHAT_*``
variable nobody reads, with a close match when there is one. Each component's README lists
its variables; ``tests/core/test_docs.py`` keeps those tables and the classes in step.
"""

from __future__ import annotations

import difflib
import logging
import os
import warnings
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import AliasChoices, Field, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

PACKAGE_DATA = Path(__file__).resolve().parent / "data"
ENV_PREFIX = "AGENTCHAT_"
# Components, by the package that declares their settings.
COMPONENTS = ("agent", "policy", "operator", "sandbox")

log = logging.getLogger("agentchat.settings")

# The agent's variables before the convention (old name -> new name). Frozen history: it never
# grows; tests/core/test_settings.py checks it against AgentSettings.
RENAMED_ENV: dict[str, str] = {
    f"{ENV_PREFIX}{name}": f"{ENV_PREFIX}AGENT_{name}" for name in (
        "HOST", "PORT", "MOUNT_PATH", "POLICY_URL", "POLICY_TIMEOUT_S", "SSTOOLS_URL",
        "SERVICE_TOKEN_FILE", "SERVICE_TOKEN_URL", "SERVICE_CLIENT_ID", "SERVICE_CLIENT_SECRET",
        "SERVICE_TOKEN_REFRESH_MARGIN_S", "LLM", "LLM_BASE_URL", "LLM_API_KEY", "LLM_TIMEOUT_S",
        "PLANNER_TOKEN_DELAY_S", "LLM_STATUS_CACHE_S", "FLUSH_INTERVAL_S", "CHAT_CONCURRENCY",
        "LEASE_S", "CONFIRMATION_TTL_S", "MAX_TEXT_BYTES", "MAX_UICONTEXT_BYTES", "MAX_FILES",
        "MAX_FILE_BYTES", "MAX_FILES_TOTAL_BYTES", "MAX_BODY_BYTES",
        "MAX_CONCURRENT_RUNS_PER_USER", "MAX_SUBMITS_PER_MINUTE_PER_USER",
        "MAX_TOOL_OUTPUT_CHARS", "DB_POOL_MAX", "SELECTION_EMBEDDINGS", "SELECTION_THRESHOLD",
        "SELECTION_MIN_TOOLS", "SELECTION_FALLBACK_TOP_K", "SELECTION_INTENT_BONUS",
        "EMBEDDINGS_URL", "EMBEDDINGS_MODEL", "EMBEDDINGS_API_KEY", "EMBEDDINGS_TIMEOUT_S",
        "EMBEDDINGS_QUERY_PREFIX", "EMBEDDINGS_DOCUMENT_PREFIX",
    )
}


_OLD_NAME = {new: old for old, new in RENAMED_ENV.items()}


def component_of(cls: type[BaseSettings], field_name: str) -> str | None:
    """The component whose package declares the field; None for a shared setting."""
    for klass in reversed(cls.__mro__):
        fields = getattr(klass, "__pydantic_fields__", None)
        if isinstance(fields, dict) and field_name in fields:
            parts = klass.__module__.split(".")
            if len(parts) > 1 and parts[0] == "agentchat" and parts[1] in COMPONENTS:
                return parts[1]
            return None
    return None


def _explicit_alias(field: FieldInfo) -> str | None:
    alias = field.validation_alias
    if isinstance(alias, str):
        return alias.upper()
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0].upper()
    return None


def env_name(cls: type[BaseSettings], field_name: str) -> str:
    """The environment variable of one field, by the convention above."""
    explicit = _explicit_alias(cls.model_fields[field_name])
    if explicit is not None:
        return explicit
    component = component_of(cls, field_name)
    name = field_name.upper()
    if component is not None and not field_name.startswith(component + "_"):
        name = f"{component.upper()}_{name}"
    return ENV_PREFIX + name


def env_names(cls: type[BaseSettings]) -> dict[str, str]:
    """field name -> environment variable, for every field of a settings class."""
    return {name: env_name(cls, name) for name in cls.model_fields}


def renamed(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with each old agent name replaced by its new name (the new name wins when
    both are given). For callers that assemble a component's environment (tests, bench)."""
    out: dict[str, str] = {}
    for key, value in environ.items():
        new = RENAMED_ENV.get(key)
        if new is None:
            out[key] = value
        elif new not in environ:
            out[new] = value
    return out


def _deprecated(old: str, new: str, *, ignored: bool) -> None:
    msg = (f"{old} is ignored: {new} is set, and {old} is its deprecated old name"
           if ignored else f"{old} is deprecated; use {new}")
    warnings.warn(msg, DeprecationWarning, stacklevel=2)
    log.warning("%s", msg)


class ConventionEnvSource(EnvSettingsSource):
    """The environment source with the convention's names and the old agent names."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        env = dict(super()._load_env_vars())
        if self.case_sensitive:
            return env
        for field_name in self.settings_cls.model_fields:
            new = env_name(self.settings_cls, field_name)
            old = _OLD_NAME.get(new)
            if old is None or old.lower() not in env:
                continue
            if new.lower() in env:
                _deprecated(old, new, ignored=True)
            else:
                _deprecated(old, new, ignored=False)
                env[new.lower()] = env[old.lower()]
        return env

    def _extract_field_info(self, field: FieldInfo, field_name: str,
                            model_config: Mapping[str, Any] | None = None,
                            ) -> list[tuple[str, str, bool]]:
        info = super()._extract_field_info(field, field_name, model_config)
        if model_config is not None or field.validation_alias is not None:
            return info  # a nested model, or a field that names its own variable
        if field_name not in self.settings_cls.model_fields:
            return info
        name = self._apply_case_sensitive(env_name(self.settings_cls, field_name))
        return [(key, name, complex_) for key, _, complex_ in info]


def _core(name: str) -> str:
    """A name without its component part: what a typo of an old or new name is closest to."""
    for c in COMPONENTS:
        if name.startswith(f"{ENV_PREFIX}{c.upper()}_"):
            return ENV_PREFIX + name[len(ENV_PREFIX) + len(c) + 1:]
    return name


def suggest(name: str, candidates: Iterable[str]) -> str | None:
    """The closest setting to a misspelt variable (difflib), by full name or without the
    component part (AGENTCHAT_CONFIRM_TTL_S -> AGENTCHAT_AGENT_CONFIRMATION_TTL_S)."""
    best: tuple[float, str] | None = None
    for cand in candidates:
        score = max(difflib.SequenceMatcher(None, name, cand).ratio(),
                    difflib.SequenceMatcher(None, _core(name), _core(cand)).ratio())
        if score >= 0.8 and (best is None or score > best[0]):
            best = (score, cand)
    return best[1] if best else None


def report_unknown_env(settings_cls: type[BaseSettings],
                       environ: Mapping[str, str] | None = None) -> list[str]:
    """Warn (and return the warnings) about AGENTCHAT_* variables that name no setting this
    component reads: typos, or names from an old README. Variables in another component's
    namespace (AGENTCHAT_<OTHER>_*) are that component's to report; the old agent names are
    known (the agent warns about them when it reads them)."""
    environ = os.environ if environ is None else environ
    own = set(env_names(settings_cls).values())
    mine = {component_of(settings_cls, f) for f in settings_cls.model_fields} - {None}
    others = tuple(f"{ENV_PREFIX}{c.upper()}_" for c in COMPONENTS if c not in mine)
    candidates = sorted(own | set(RENAMED_ENV.values()))
    out = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in own or upper in RENAMED_ENV:
            continue
        if others and upper.startswith(others):
            continue
        close = suggest(upper, candidates)
        hint = f"; did you mean {close}?" if close else ""
        msg = f"unknown setting {name} (no setting of this component has that name){hint}"
        log.warning("%s", msg)
        out.append(msg)
    return out


class SharedSettings(BaseSettings):
    """Database, data folder, identities and the tool catalog."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore",
                                      populate_by_name=True)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment by the convention (module docstring), the old agent names included.
        return (init_settings, ConventionEnvSource(settings_cls), dotenv_settings,
                file_secret_settings)

    # Unset: an embedded PostgreSQL is started under data_dir (see agentchat.db).
    database_url: str | None = Field(default=None, validation_alias="DATABASE_URL")
    data_dir: Path = Path(".data")
    # "dev" enables the demo issuer, placeholder secrets and the sandbox; "production" refuses them.
    # Unset is production (fail closed): `make demo`, the tests and the dev chart profile say
    # "dev" explicitly, so a deployment that forgets the variable never gets the dev shortcuts.
    mode: Literal["dev", "production"] = "production"
    # Apply pending migrations when a component starts (dev, the demo, the tests). The chart
    # turns it off: its hook Job runs `agentchat migrate` once per release, and the agent only
    # checks the schema, waiting up to schema_wait_s for it, then refuses to start.
    migrate_on_start: bool = True
    schema_wait_s: float = 120.0

    catalog_path: Path = PACKAGE_DATA / "catalog.yaml"

    # Service tokens (ours): EdDSA keys with next/current/previous stages, docs/protocol.md §8.
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
    # How often a verifier stats its JWKS file (0: on every token). A key removed from the
    # file is refused within this long; each stat gave the event loop's GIL away, which a
    # turn's start paid for on every request (bench/HISTORY.md, "A token kept once verified").
    jwks_check_s: float = Field(default=1.0, ge=0, le=60)

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

    def dev_only_switches(self) -> list[str]:
        """What this configuration sets that only benchmarks and tests may (a trail turned
        off), as `VARIABLE=value`: each component names its own."""
        return []

    @model_validator(mode="after")
    def _dev_only_switches_outside_dev(self) -> Self:
        # A benchmark's baseline turns the audit trail or the event log off; a production
        # deployment that copied its environment would lose them without a word.
        on = [] if self.is_dev else self.dev_only_switches()
        if on:
            raise ValueError(f"{', '.join(on)}: for benchmarks and tests only, refused outside "
                             "dev mode (AGENTCHAT_MODE=dev)")
        return self
