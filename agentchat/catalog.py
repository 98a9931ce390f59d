"""The declarative tool catalog that the agent, the policy sidecar and the sandbox all read.

One YAML file lists every tool the agent may call on the ss-tools API: a title, a card prompt
template, descriptions, keywords and example requests in Russian and English, the JSON schema
of its arguments, HTTP method and path, which argument names the environment (two for a
migration), risk, where a `write` needs a card, timeout, retry budget and safer alternatives.
A broken file is refused at load with a message naming the file, the tool and the field.
"""

from __future__ import annotations

import hashlib
import string
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from agentchat import catalog_upstreams as ups
from agentchat.errors import CatalogError
from agentchat.patterns import check_schema
from agentchat.words import Lang, clean_text, object_label, safe_name

Risk = Literal["read", "write", "destructive"]
RISK_LEVEL: dict[str, str] = {"read": "safe", "write": "guarded", "destructive": "dangerous"}
# The objects a card prompt may name: `{dashboard}` is the dashboard of the call's
# `dashboard_id`, shown as «its title» (№42), or №42 when no title is known.
OBJECT_KINDS: dict[str, str] = {"dashboard": "dashboard_id", "dataset": "dataset_id",
                                "database": "database_id"}
ENV_PLACEHOLDER = "env"  # the call's target environment (the tool's environment argument)


class Localized(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    ru: str = Field(min_length=1)
    en: str = Field(min_length=1)


class Keywords(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    ru: list[str] = Field(min_length=1)
    en: list[str] = Field(min_length=1)


class Examples(BaseModel):
    """A few short things a user would say when the tool is what they need, per language.
    The selection's embedding fallback compares queries with them (they are not keywords):
    a paraphrase is nearer to another paraphrase than to a one-line description."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ru: list[Annotated[str, Field(min_length=3, max_length=200)]] = []
    en: list[Annotated[str, Field(min_length=3, max_length=200)]] = []


class Alternative(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    action: str
    prompt: Localized


class EnvironmentArgs(BaseModel):
    """Which arguments name environments: `argument` is the target (the tool's own
    permission applies), `source_argument` a source that only needs read (migrations)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    argument: str
    source_argument: str | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{2,63}$")
    # What people see instead of `name`: tool cards, answers, the model's tool descriptions.
    title: Localized
    # The card's question, a template (`placeholders` says what it may use); checked by the
    # Catalog, which names the tool and the field of a broken one.
    prompt: Localized
    description: Localized
    keywords: Keywords
    examples: Examples = Examples()
    args: dict[str, Any]
    # Where it runs: an ss-tools request (`method` and `path`), or another team's MCP server's
    # tool (`upstream`, agentchat/catalog_upstreams.py), never both.
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] | None = None
    path: str | None = Field(default=None, pattern=r"^/api/")
    upstream: ups.UpstreamTool | None = None
    environment: EnvironmentArgs | None = None
    risk: Risk
    # Environments where a `write` needs a card; `destructive` always needs one.
    confirm_in: list[str] = []
    timeout_s: float = Field(default=30.0, gt=0, le=600)
    max_attempts: int = Field(default=2, ge=1, le=10)
    alternatives: list[Alternative] = []
    # Arguments that are words for people (a reason, a comment) and never change what runs:
    # the only ones a time-boxed grant's object leaves out (agentchat/digest.py `object_key`).
    # Absent in older files: every argument counts.
    free_text: list[str] = []
    # Dashboard-centric tools that the agent may prefetch for (see agent tool selection).
    prefetch: bool = False

    @field_validator("args")
    @classmethod
    def _args_is_object_schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        if v.get("type") != "object":
            raise ValueError("must be a JSON schema with type: object")
        check_schema(v)  # its patterns must compile in RE2 (linear time), too
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Tool:
        props = self.args.get("properties", {})
        http = (self.method, self.path) != (None, None)
        if http == (self.upstream is not None) or (http and None in (self.method, self.path)):
            raise ValueError("a tool has either method and path (ss-tools) or upstream")
        if self.upstream is None and ups.SEPARATOR in self.name:
            raise ValueError(f"{ups.SEPARATOR!r} in a name is for upstream tools (server__tool)")
        for placeholder in self.path_params():
            if placeholder not in props:
                raise ValueError(f"path parameter {{{placeholder}}} is not an argument")
        if self.environment is not None:
            for arg in (self.environment.argument, self.environment.source_argument):
                if arg is not None and arg not in props:
                    raise ValueError(f"environment argument {arg!r} is not an argument")
        if self.confirm_in and self.risk != "write":
            raise ValueError("confirm_in only applies to write tools")
        if self.risk != "read" and self.environment is None:
            raise ValueError(f"a {self.risk} tool must declare its environment argument")
        for placeholder in self.path_params():
            if not _tight(props[placeholder]):
                raise ValueError(f"path parameter {{{placeholder}}} needs a typed schema: "
                                 "an integer, or a string with a pattern")
        required = set(self.args.get("required", []))
        for arg in self.environment_arguments():
            if arg not in required:
                raise ValueError(f"environment argument {arg!r} must be required")
        for arg in self.free_text:
            # What a grant covers is every argument but these: never one that picks what runs.
            if (arg not in props or arg in self.environment_arguments() or arg == "version"
                    or arg in self.path_params() or props[arg].get("type") != "string"):
                raise ValueError(f"free_text argument {arg!r} must be a string argument that "
                                 "names no environment, version or path part")
        return self

    @property
    def risk_level(self) -> str:
        return RISK_LEVEL[self.risk]

    def placeholders(self) -> set[str]:
        """What a prompt template may name: a required argument, `env` (the target
        environment) when the tool has one, an object kind whose id argument is required."""
        required = set(self.args.get("required", []))
        names = set(required)
        if self.environment is not None:
            names.add(ENV_PLACEHOLDER)
        names |= {kind for kind, arg in OBJECT_KINDS.items() if arg in required}
        return names

    def card_prompt(self, arguments: dict[str, Any], lang: Lang,
                    names: dict[str, str] | None = None) -> str:
        """The card's prompt: the catalog's words with the validated arguments filled in.
        Object names (`names`: kind -> name, from ss-tools results or the UIContext) are
        quoted and cut (words.safe_name); free-text arguments are quoted too."""
        names = names or {}
        values: dict[str, str] = {}
        for field in template_fields(self.prompt.ru if lang == "ru" else self.prompt.en):
            if field == ENV_PLACEHOLDER:
                target, _ = self.environments_of(arguments)
                values[field] = clean_text(target or "")
            elif field in OBJECT_KINDS:
                values[field] = object_label(arguments.get(OBJECT_KINDS[field], "?"),
                                             names.get(field), lang)
            else:
                values[field] = _argument_words(self, field, arguments.get(field), lang)
        template = self.prompt.ru if lang == "ru" else self.prompt.en
        return template.format_map(values)

    def title_in(self, lang: Lang) -> str:
        return self.title.ru if lang == "ru" else self.title.en

    def description_in(self, lang: Lang) -> str:
        return self.description.ru if lang == "ru" else self.description.en

    def needs_card(self, environment: str | None) -> bool:
        """Whether a permitted call needs a human answer (docs/protocol.md §3)."""
        if self.risk == "destructive":
            return True
        if self.risk == "write":
            return environment in self.confirm_in
        return False

    def path_params(self) -> list[str]:
        return _path_params(self.path or "")

    def environment_arguments(self) -> list[str]:
        """The arguments that name environments (target first)."""
        if self.environment is None:
            return []
        return [a for a in (self.environment.argument, self.environment.source_argument) if a]

    def environments_of(self, arguments: dict[str, Any]) -> tuple[str | None, str | None]:
        """(target, source) environments named by a call's arguments."""
        if self.environment is None:
            return None, None
        target = arguments.get(self.environment.argument)
        source = (
            arguments.get(self.environment.source_argument)
            if self.environment.source_argument
            else None
        )
        return (str(target) if target is not None else None,
                str(source) if source is not None else None)


def template_fields(template: str) -> list[str]:
    """The placeholders of a prompt template, in order; ValueError for a malformed one (an
    unclosed brace, a format spec or conversion, an index or attribute)."""
    fields = []
    for _, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            continue
        if spec or conversion:
            raise ValueError(f"placeholder {{{name}}} may not carry a format or conversion")
        if not name.isidentifier():
            raise ValueError(f"placeholder {{{name}}} is not a plain name")
        fields.append(name)
    return fields


def _argument_words(tool: Tool, name: str, value: Any, lang: Lang) -> str:
    """An argument in a prompt: numbers and environments as they are (validated), any other
    string quoted and cut: the model or the user wrote it."""
    if isinstance(value, bool) or value is None:
        return clean_text(value if value is not None else "")
    if isinstance(value, int | float):
        return str(value)
    if name in tool.environment_arguments():
        return clean_text(value)
    return safe_name(value, lang)


def _tight(schema: Any) -> bool:
    """A path parameter's schema must pin its type: an integer, or a string with a pattern
    (so no value can carry a `/`, `?` or `..` into the URL, whatever the model writes)."""
    if not isinstance(schema, dict):
        return False
    return schema.get("type") == "integer" or (
        schema.get("type") == "string" and isinstance(schema.get("pattern"), str))


def _path_params(path: str) -> list[str]:
    out, rest = [], path
    while "{" in rest:
        _, _, rest = rest.partition("{")
        name, _, rest = rest.partition("}")
        out.append(name)
    return out


class Catalog(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = 1
    environments: list[str] = Field(min_length=1)
    # Other teams' MCP servers by name (agentchat/catalog_upstreams.py).
    upstreams: dict[Annotated[str, Field(pattern=ups.SERVER_NAME)], ups.Upstream] = {}
    tools: list[Tool] = Field(min_length=1)
    # The file's revision (`catalog_revision`), set by `parse_catalog`; empty when built in code.
    _revision: str = PrivateAttr(default="")

    @property
    def revision(self) -> str:
        return self._revision

    @model_validator(mode="after")
    def _references(self) -> Catalog:
        names = [t.name for t in self.tools]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"duplicate tool names: {sorted(dupes)}")
        for t in self.tools:
            if t.upstream is not None:
                try:
                    ups.check_upstream_tool(t.name, t.upstream, self.upstreams, self.environments,
                                        t.environment_arguments())
                except ValueError as e:
                    raise ValueError(f"tool {t.name!r}: {e}") from None
            for alt in t.alternatives:
                if alt.action not in names:
                    raise ValueError(
                        f"tool {t.name!r}: field alternatives: unknown tool {alt.action!r}"
                    )
            for lang in ("ru", "en"):
                template = getattr(t.prompt, lang)
                try:
                    fields = template_fields(template)
                except ValueError as e:
                    raise ValueError(f"tool {t.name!r}: field prompt.{lang}: {e}") from None
                for name in fields:
                    if name not in t.placeholders():
                        raise ValueError(
                            f"tool {t.name!r}: field prompt.{lang}: placeholder {{{name}}} is "
                            "not a required argument, env or an object of a required id "
                            f"(may use: {', '.join(sorted(t.placeholders())) or 'none'})")
            for env in t.confirm_in:
                if env not in self.environments:
                    raise ValueError(f"tool {t.name!r}: field confirm_in: unknown env {env!r}")
            for arg in t.environment_arguments():
                # The catalog's environments and nothing else: a model cannot name a new one.
                schema = t.args["properties"][arg]
                if schema.get("type") != "string" or sorted(schema.get("enum") or []) != sorted(
                        self.environments):
                    raise ValueError(f"tool {t.name!r}: field args.properties.{arg}: an "
                                     "environment argument needs type string and the "
                                     "catalog's environments as its enum")
        return self

    def get(self, name: str) -> Tool | None:
        return self._by_name.get(name)

    @cached_property
    def _by_name(self) -> dict[str, Tool]:
        # Every call looks its tool up (gate, runtime, titles): the frozen tools indexed once.
        return {t.name: t for t in self.tools}

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tools]


def _describe(path: Path, raw: Any, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = list(e["loc"])
        where = ""
        if len(loc) >= 2 and loc[0] == "tools" and isinstance(loc[1], int):
            tools = raw.get("tools", []) if isinstance(raw, dict) else []
            name = tools[loc[1]].get("name", f"#{loc[1]}") if loc[1] < len(tools) and isinstance(
                tools[loc[1]], dict) else f"#{loc[1]}"
            field = ".".join(str(p) for p in loc[2:]) or "(tool)"
            where = f"tool {name!r}: field {field}: "
        elif loc:
            where = "field " + ".".join(str(p) for p in loc) + ": "
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"{path}: {where}{msg}")
    return "; ".join(lines)


def catalog_revision(data: bytes) -> str:
    """A catalog file's revision: its bytes' sha256, 16 hex digits. The agent sends it with
    every check and the sidecar answers only for the revision it serves (protocol §6)."""
    return hashlib.sha256(data).hexdigest()[:16]


def load_catalog(path: Path | str) -> Catalog:
    """Read and validate a catalog file; CatalogError names the file, tool and field."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CatalogError(f"{path}: cannot read the catalog: {e.strerror}") from None
    return parse_catalog(data, path)


def parse_catalog(data: bytes, path: Path | str) -> Catalog:
    """A catalog from a file's bytes (read once: its revision is of exactly these bytes)."""
    path = Path(path)
    try:
        raw = yaml.safe_load(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise CatalogError(f"{path}: not UTF-8") from None
    except yaml.YAMLError as e:
        raise CatalogError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise CatalogError(f"{path}: the catalog must be a mapping with `tools`")
    try:
        catalog = Catalog.model_validate(raw)
    except ValidationError as e:
        raise CatalogError(_describe(path, raw, e)) from None
    catalog._revision = catalog_revision(data)
    return catalog


@lru_cache(maxsize=8)
def cached_catalog(path: str) -> Catalog:
    return load_catalog(path)
