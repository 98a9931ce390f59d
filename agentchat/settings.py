"""Settings every component shares, and the one naming convention of their variables.

Each component's settings class extends :class:`SharedSettings` (one class per component,
instantiated once at its entry point). Values come from the environment:

- a shared setting (declared here) is ``AGENTCHAT_<NAME>`` (plus ``DATABASE_URL``);
- a component's own setting is ``AGENTCHAT_<COMPONENT>_<NAME>``: ``AGENTCHAT_AGENT_LLM``,
  ``AGENTCHAT_POLICY_DIR``, ``AGENTCHAT_OPERATOR_NAMESPACES``, ``AGENTCHAT_SANDBOX_PORT``. The
  component is the package that declares the field (``agentchat.agent.*`` is the agent); a
  field already named after its component (``policy_dir``) is not prefixed twice;
- a component's tuning (what its own table calls tuning: intervals, caches, limits nobody
  outside its benchmarks needs to change) is one nested model, the field :data:`TUNING`, whose
  fields are ``AGENTCHAT_<COMPONENT>_TUNING__<NAME>`` (pydantic-settings' nested delimiter,
  :data:`NESTED`): ``AGENTCHAT_AGENT_TUNING__LEASE_S``. Keyword arguments use the field names
  (``AgentSettings(tuning={"lease_s": 3})``).

Knobs more than one component reads are declared once: the shared settings here, and
:class:`ServerTuning`, the tuning of each process that verifies tokens over HTTP (the agent and
the policy sidecar). :func:`report_unknown_env` warns at start about an ``AGENTCHAT_*``
variable nobody reads (a typo, a name from an old README), with a close match when there is
one. Each component's README lists its variables; ``tests/core/test_docs.py`` keeps those
tables and the classes in step.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import AliasChoices, BaseModel, Field, model_validator
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

# The nested tuning model's field, and the delimiter of its variables' names.
TUNING = "tuning"
NESTED = "__"


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
    """The environment variable of one field, by the convention above; a tuning field is
    named by its path (``tuning.lease_s``)."""
    if "." in field_name:
        outer, inner = field_name.split(".", 1)
        return f"{env_name(cls, outer)}{NESTED}{inner.upper()}"
    explicit = _explicit_alias(cls.model_fields[field_name])
    if explicit is not None:
        return explicit
    component = component_of(cls, field_name)
    name = field_name.upper()
    if component is not None and not field_name.startswith(component + "_"):
        name = f"{component.upper()}_{name}"
    return ENV_PREFIX + name


def tuning_model(cls: type[BaseSettings]) -> type[BaseModel] | None:
    """The class of a settings class's nested tuning, if it has one."""
    field = cls.model_fields.get(TUNING)
    kind = field.annotation if field is not None else None
    return kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None


def env_names(cls: type[BaseSettings]) -> dict[str, str]:
    """field name -> environment variable, for every setting of a class: its fields, and its
    tuning's fields by their path (``tuning.lease_s``) instead of the tuning itself."""
    names = {name: env_name(cls, name) for name in cls.model_fields if name != TUNING}
    tuning = tuning_model(cls)
    if tuning is not None:
        names |= {f"{TUNING}.{n}": env_name(cls, f"{TUNING}.{n}") for n in tuning.model_fields}
    return names


def refusals(cls: type[BaseSettings], errors: Iterable[Mapping[str, Any]]) -> str:
    """A settings class's validation errors, one per refused variable, named, never the
    input (the environment holds secrets): for a command's "refusing to start" line."""
    out = []
    for err in errors:
        path = ".".join(str(p) for p in err.get("loc", ()))
        try:
            named = env_name(cls, path) if path else ""
        except KeyError:
            named = ""
        msg = str(err["msg"])
        out.append(f"{named}: {msg}" if named and named not in msg else msg)
    return "; ".join(out)


class ConventionEnvSource(EnvSettingsSource):
    """The environment source with the convention's names."""

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
    """A name without its component and tuning parts: what a typo, or a name from before a
    setting moved into its component's tuning, is closest to."""
    for c in COMPONENTS:
        if name.startswith(f"{ENV_PREFIX}{c.upper()}_"):
            name = ENV_PREFIX + name[len(ENV_PREFIX) + len(c) + 1:]
            break
    return name.replace(f"{TUNING.upper()}{NESTED}", "", 1)


def suggest(name: str, candidates: Iterable[str]) -> str | None:
    """The closest setting to a misspelt or outdated variable (difflib), by full name or
    without the component and tuning parts (AGENTCHAT_CONFIRM_TTL_S ->
    AGENTCHAT_AGENT_CONFIRMATION_TTL_S, AGENTCHAT_AGENT_LEASE_S ->
    AGENTCHAT_AGENT_TUNING__LEASE_S)."""
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
    namespace (AGENTCHAT_<OTHER>_*) are that component's to report."""
    environ = os.environ if environ is None else environ
    own = set(env_names(settings_cls).values())
    mine = {component_of(settings_cls, f) for f in settings_cls.model_fields} - {None}
    others = tuple(f"{ENV_PREFIX}{c.upper()}_" for c in COMPONENTS if c not in mine)
    candidates = sorted(own)
    out = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in own:
            continue
        if others and upper.startswith(others):
            continue
        close = suggest(upper, candidates)
        hint = f"; did you mean {close}?" if close else ""
        msg = f"unknown setting {name} (no setting of this component has that name){hint}"
        log.warning("%s", msg)
        out.append(msg)
    return out


class ServerTuning(BaseModel):
    """The tuning every process that verifies tokens over HTTP reads: the agent and the policy
    sidecar, each under its own tuning (AGENTCHAT_AGENT_TUNING__TOKEN_CACHE_S,
    AGENTCHAT_POLICY_TUNING__TOKEN_CACHE_S), declared here once. A component whose own default
    differs names it in ``DEFAULTS``."""

    DEFAULTS: ClassVar[Mapping[str, Any]] = {}

    # A verified token is kept (by its sha256, never the token) until min(exp, this many
    # seconds) while the JWKS file is unchanged (agentchat/verified_tokens.py). 0 entries: off.
    token_cache_s: float = Field(default=60.0, ge=0, le=600)
    token_cache_size: int = Field(default=10_000, ge=0)
    # The garbage collector (agentchat/heap.py): what survives start-up frozen out of its walks,
    # and its first generation collected every `gc_gen0_threshold` net allocations (0:
    # Python's own, 700).
    gc_freeze: bool = True
    gc_gen0_threshold: int = Field(default=0, ge=0)
    # Any request body over this is refused before a route reads it.
    max_body_bytes: int = Field(default=64 * 1024, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _component_defaults(cls, data: Any) -> Any:
        return {**cls.DEFAULTS, **data} if isinstance(data, dict) else data

    @classmethod
    def default_of(cls, name: str) -> Any:
        """A field's default in this component (its DEFAULTS first)."""
        if name in cls.DEFAULTS:
            return cls.DEFAULTS[name]
        return cls.model_fields[name].get_default(call_default_factory=True)


class SharedSettings(BaseSettings):
    """Database, data folder, identities and the tool catalog."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore",
                                      populate_by_name=True, env_nested_delimiter=NESTED)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment by the convention (module docstring).
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
