"""Settings of the agent service: AGENTCHAT_AGENT_<NAME>, and its tuning
AGENTCHAT_AGENT_TUNING__<NAME> (the convention of agentchat/settings.py).
agent/README_settings.md lists them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from agentchat.settings import TUNING, ServerTuning, SharedSettings, env_name

PLACEHOLDER_SECRET = "dev-client-secret"
# A resume key shorter than this seals nothing (agent/storage/sealing.py).
RESUME_KEY_MIN_CHARS = 32


def smtp_refusal(url: str) -> str | None:
    """Why AGENTCHAT_AGENT_SMTP_URL is refused (agent/chat/mail.py sends by it), naming no
    part of it: it may hold a password."""
    parts = urlsplit(url)
    if parts.scheme not in ("smtp", "smtp+starttls", "smtps"):
        return "AGENTCHAT_AGENT_SMTP_URL: the scheme must be smtp, smtp+starttls or smtps"
    if not parts.hostname:
        return "AGENTCHAT_AGENT_SMTP_URL: no host"
    if (parts.username or parts.password) and parts.scheme == "smtp":
        return ("AGENTCHAT_AGENT_SMTP_URL: a login needs TLS; use smtp+starttls:// or "
                "smtps:// (smtp:// never sends credentials in the clear)")
    return None


def resume_keys(listed: str) -> tuple[str, ...]:
    """Resume keys as listed, newest first: separated by commas or newlines, blanks
    dropped (AGENTCHAT_AGENT_RESUME_KEY, and the key file's lines)."""
    return tuple(k.strip() for k in re.split(r"[,\n]", listed) if k.strip())

# The built-in page's own Gradio app, under the mount path (the mount path itself redirects a
# browser there): the `/chat` app holds no page components, so its sessions stay small.
PAGE_SUBPATH = "/page"
# The MCP endpoint, and its RFC 9728 metadata's path (the well-known prefix, then this).
MCP_PATH = "/api/agent/mcp"


class SelectionTuning(BaseModel):
    """Tool selection's tuning: the embedding fallback (agent/README_selection.md)."""

    selection_embeddings: str = "use"
    # None: the backend's own tuned threshold.
    selection_threshold: float | None = None
    selection_min_tools: int = 3
    selection_fallback_top_k: int = 3
    selection_intent_bonus: float = 0.1
    embeddings_url: str | None = None
    embeddings_model: str | None = None
    embeddings_api_key: SecretStr | None = None
    embeddings_timeout_s: float = 2.0
    embeddings_query_prefix: str = ""
    embeddings_document_prefix: str = ""


class AgentTuning(ServerTuning, SelectionTuning):
    """What the agent's benchmarks and tests change, and no deployment needs to:
    AGENTCHAT_AGENT_TUNING__<NAME> (agent/README_settings.md, "Tuning"). The token cache,
    the collector and the body limit are the shared ServerTuning's, with the agent's defaults."""

    # A full collection at 200 live streams took ~430 ms unfrozen, ~140 frozen; ~900 young
    # collections of ~2.8 ms each a 200-stream round at Python's 700, 5 at 50,000. The body
    # limit is any REST or /chat request's (not Gradio's upload route, which has its own
    # per-file limit): over it is 413 INVALID_REQUEST before a route sees it (agentchat/asgi.py).
    DEFAULTS: ClassVar[Mapping[str, Any]] = {"gc_gen0_threshold": 50_000,
                                             "max_body_bytes": 1024 * 1024}

    mount_path: str = "/api/agent/gradio"
    # The sidecar's decision budget (docs/protocol.md §5: 200 ms).
    policy_timeout_s: float = 0.2
    # How often the catalog file is stat'ed for a change (agentchat/catalog_source.py): a
    # check asked in between carries the old revision, which the sidecar refuses once it has
    # the new one (POLICY_UNAVAILABLE, retryable).
    catalog_check_s: float = Field(default=1.0, gt=0)
    # A fetched service token is refreshed this long before it expires.
    service_token_refresh_margin_s: int = 120
    # Offline planner pacing, seconds per token (0: as fast as possible).
    planner_token_delay_s: float = 0.0
    # GET /api/agent/llm-status answers from a probe at most this old (one outbound call per
    # interval however many ask; /readyz shares it).
    llm_status_cache_s: float = Field(default=60.0, ge=0)

    # Streaming: text is coalesced into one stream_token at most every this many seconds.
    flush_interval_s: float = 0.05
    # Adaptive coalescing (docs/architecture.md, "Streaming at scale"): when > 0, the interval grows
    # with the live runs so the replica sends about this many stream_tokens a second in all
    # (Gradio's cost is per event); never below flush_interval_s, so under 125 live runs nothing
    # changes. 2,500 met the CPU, gap and slowdown goals at 200 runs on an idle 2-core box where
    # fixed 50 ms met only the gap's (bench/HISTORY.md, "Coalescing: what was tried"). 0: the fixed
    # interval.
    flush_events_per_s: float = Field(default=2500.0, ge=0)
    chat_concurrency: int = 1000
    # /chat's queue sessions (agent/gradio/chat_queue.py): one nobody reads is dropped this long
    # after its last submit ends, and a replica holds at most this many (the oldest unread goes).
    chat_unread_session_s: float = Field(default=300.0, gt=0)
    chat_sessions_max: int = Field(default=10_000, ge=1)
    # How long a job may wait in an idle Gradio queue before it starts (Gradio polls every
    # 1 ms, which costs an idle replica ~9 % of a core for its two mounted Blocks).
    gradio_queue_poll_s: float = Field(default=0.01, gt=0, le=0.5)
    # An open /chat stream silent this long sends a `heartbeat` event (docs/protocol.md §2), so
    # a client notices a dead connection after two missed beats; tests shorten it.
    stream_heartbeat_s: float = Field(default=15.0, gt=0)

    # The multi-tab lease after a run's last event.
    lease_s: float = 30.0

    # Runs (docs/protocol.md §4, "Runs"): each run's events kept for joins, at most this many
    # per run (the oldest go first); off only for the benchmark's baseline (dev mode only:
    # `dev_only_switches`).
    run_events: bool = True
    run_events_max: int = Field(default=5000, ge=10)
    # A live run's replica heartbeats it this often; any replica marks a run lost after this
    # long without one (RUN_LOST).
    run_heartbeat_s: float = Field(default=2.0, gt=0)
    run_lost_s: float = Field(default=10.0, gt=0)
    # A run without a heartbeat for `run_lost_s`, or released by a draining replica, is taken
    # over by a live replica (agent/chat/takeover.py) and goes on from its last checkpoint,
    # at most `run_max_attempts` attempts in all (then RUN_LOST); replicas look for such runs
    # every `run_takeover_poll_s`. `run_takeover=false`: they are marked lost, as before.
    run_takeover: bool = True
    run_max_attempts: int = Field(default=3, ge=1)
    run_takeover_poll_s: float = Field(default=0.5, gt=0)
    # Joiners on another replica learn of new events by LISTEN on this direct connection
    # (default: the database URL); `join_listen=false` (e.g. behind a transaction-pooling
    # PgBouncer, where LISTEN does not work) polls every `join_poll_s` instead.
    join_listen: bool = True
    listen_url: str | None = None
    join_poll_s: float = Field(default=0.25, gt=0)
    # A submit while the same tab's previous run is still stopping waits this long for it.
    stop_wait_s: float = Field(default=2.0, ge=0)
    # Once no run has been live for this long, the replica collects garbage and hands the
    # freed heap back to the OS (glibc's malloc_trim), so RSS comes back after a burst of
    # streams (docs/architecture.md, "Streaming at scale"). 0: never.
    idle_trim_s: float = Field(default=2.0, ge=0)
    # This replica's name in the runs table (default: host name and process id).
    replica: str | None = None

    # Input limits (docs/protocol.md §1).
    max_text_bytes: int = 16 * 1024
    max_uicontext_bytes: int = 4 * 1024
    max_files: int = 5
    max_file_bytes: int = 1024 * 1024
    max_files_total_bytes: int = 5 * 1024 * 1024  # all of one message's files
    # Gradio's upload route (agent/chat/upload_book.py; per replica, like the files): what one
    # user may hold in the upload folder, uploads a minute, and how long an unused upload is
    # kept (all users' bytes are the public `upload_bytes_per_replica`).
    upload_files_per_user: int = Field(default=20, ge=1)
    upload_bytes_per_user: int = Field(default=20 * 1024 * 1024, ge=1)
    uploads_per_minute_per_user: int = Field(default=10, ge=1)
    upload_expiry_s: float = Field(default=3600.0, gt=0)

    # Per-user limits on /chat (agent/chat/user_limits.py; per replica): runs at once, streams at
    # once (runs and joins together), submits a minute; REST writes a minute (agent/api/deps.py).
    max_concurrent_runs_per_user: int = Field(default=4, ge=1)
    max_streams_per_user: int = Field(default=8, ge=1)
    max_submits_per_minute_per_user: int = Field(default=30, ge=1)
    max_rest_writes_per_minute_per_user: int = Field(default=60, ge=1)

    # MCP calls (agent/chat/gated_calls.py): the calls a user may have waiting for a person
    # at once (checked in the INSERT, under a per-user lock: every replica counts the same
    # rows; an expired one does not count); finished or expired ones are deleted once this
    # many days old, by each replica's sweeper at most every `mcp_calls_prune_interval_s`;
    # a caller's tool list is kept this long (≤ 5 s: a list's `ttlMs`), at most this many.
    mcp_pending_calls_per_user: int = Field(default=20, ge=1)
    mcp_calls_retention_days: float = Field(default=30.0, ge=0)
    mcp_calls_prune_interval_s: float = Field(default=600.0, gt=0)
    mcp_tools_cache_s: float = Field(default=2.0, ge=0, le=5.0)
    mcp_tools_cache_size: int = Field(default=10_000, ge=0)

    # Tool output trimmed to what a card can show.
    max_tool_output_chars: int = 4000
    # An upstream MCP tool's result (agent/gate/upstream_calls.py): at most this many bytes of
    # its text and JSON (`result_too_large` beyond; the wire is cut at twice this, the JSON
    # and its text copy, so a 10 MB answer is never read whole), then trimmed as above.
    upstream_max_result_bytes: int = Field(default=1024 * 1024, ge=1024)
    # Other teams' MCP servers (agent/gate/upstream_pins.py): each one's tools/list is read
    # this often (and at start, on a new catalog, on its list_changed), and a catalog tool
    # whose definition no longer matches its pin is quarantined on every replica.
    upstream_refresh_s: float = Field(default=180.0, gt=0)

    # How often each replica's sweeper applies the audit trail's retention.
    audit_prune_interval_s: float = Field(default=3600.0, gt=0)
    # The notification outbox: how often each replica looks for due notifications, and the
    # first retry's delay (doubling, at most 5 minutes).
    outbox_poll_s: float = Field(default=1.0, gt=0)
    outbox_retry_s: float = Field(default=5.0, gt=0)

    # The built page (web/build): unset is the checkout's own; the image sets a fixed path.
    ui_dir: Path = Path(__file__).resolve().parents[1] / "web" / "build"


class SelectionSettings(SharedSettings):
    """The settings tool selection reads: the shared ones and the selection tuning, under the
    agent's names (AGENTCHAT_AGENT_TUNING__SELECTION_*); AgentSettings extends it, and
    `selector_for` reads it alone."""

    tuning: SelectionTuning = Field(default_factory=SelectionTuning)


class AgentSettings(SelectionSettings):
    """What a deployment of the agent sets (agent/README_settings.md); the rest is `tuning`."""

    # A refused setting never echoes the environment (keys, passwords in URLs) into the error.
    model_config = SettingsConfigDict(hide_input_in_errors=True)

    host: str = "127.0.0.1"
    port: int = 7860

    # The policy sidecar.
    policy_url: str = "http://127.0.0.1:8181"

    # The ss-tools API (the sandbox in dev).
    sstools_url: str = "http://127.0.0.1:8800"
    # The service JWT: a file re-read when it changes (the operator's Secret), or else the
    # ss-tools endpoint POST /api/auth/service-token with a client secret.
    service_token_file: Path | None = None
    service_token_url: str | None = None
    service_client_id: str = "agentchat-agent"
    service_client_secret: str | None = None

    # The model: "offline" (the deterministic planner) or an init_chat_model id.
    llm: str = "offline"
    llm_base_url: str | None = None
    llm_api_key: str | None = None
    llm_timeout_s: float = 60.0

    # A confirmation card's life.
    confirmation_ttl_s: float = 300.0

    # The keys that seal the user token a live run keeps for its takeover
    # (agent/storage/sealing.py), newest first: a list separated by commas or newlines, or a
    # file holding one a line (the operator's, re-read when it changes); unset: one derived
    # from `service_client_secret`.
    resume_key: str | None = None
    resume_key_file: Path | None = None
    # Live runs this replica takes at most (AGENT_SATURATED beyond), and how long a SIGTERM
    # lets them finish before they are marked lost.
    max_live_runs: int = Field(default=1000, ge=1)
    drain_s: float = Field(default=30.0, ge=0)
    # All users' uploads on this replica together (the chart sets it under the upload
    # volume's size limit; the per-user quotas are tuning).
    upload_bytes_per_replica: int = Field(default=48 * 1024 * 1024, ge=1)

    # The audit trail of write and destructive calls (agent/audit/): off only for the
    # benchmark's baseline (dev mode only: `dev_only_switches`). Retention cuts a prefix of
    # the chain older than this many days (0 keeps everything), in the sweeper; it is the
    # trail's own, never the checkpoint pruner's. `audit_role` (`role` or `role@env` in the
    # user token) reads every record, or that environment's, at GET /api/agent/audit.
    audit: bool = True
    audit_retention_days: float = Field(default=365.0, ge=0)
    audit_role: str = Field(default="auditor", pattern=r"^[A-Za-z0-9_.-]+$")
    # The key of the audit's session hashes (agent/audit/trail.py `session_ref`); unset: a
    # random key per process. Every replica needs the same one to correlate a tab's answers.
    audit_session_key: str | None = Field(default=None, min_length=32)

    # Approvals by someone else (docs/protocol.md §11): their notifications, from
    # an outbox in PostgreSQL. The webhook is sent only with its secret (signed); e-mail goes
    # to the environment's recipients (`{"prod": ["ops@example.com"], "*": [...]}`), an
    # escalation to the escalation recipients. `public_url` prefixes the links (the panel's).
    approval_webhook_url: str | None = None
    approval_webhook_secret: str | None = Field(default=None, min_length=16)
    # smtp://, smtp+starttls:// or smtps:// (agent/chat/mail.py): TLS verified (against the
    # CA file alone when set), credentials only with TLS (refused at start otherwise).
    smtp_url: str | None = None
    smtp_ca_file: Path | None = None
    smtp_from: str = "agentchat@localhost"
    approval_email_to: dict[str, list[str]] = Field(default_factory=dict)
    approval_escalation_email_to: dict[str, list[str]] = Field(default_factory=dict)
    public_url: str = ""

    # Origins (`https://ss.example.com`) besides the agent's own host and `public_url`'s from
    # which a browser may change things over REST (agent/api/deps.py `same_site`), as JSON.
    allowed_origins: list[str] = Field(default_factory=list)

    # The MCP endpoint (agent/mcp/, docs/protocol.md §12), on unless false. Its tokens' audience
    # is its resource URL (unset: `public_url` + MCP_PATH); each is exchanged (RFC 8693) at the
    # issuer's token endpoint (unset: `sstools_url` + /api/auth/token) for the ss-tools user
    # token its calls carry.
    mcp_enabled: bool = True
    mcp_audience: str | None = None
    mcp_token_exchange_url: str | None = None

    # Other teams' MCP servers (the catalog's `upstreams`, agent/gate/upstream_auth.py): each
    # one's credential is a file in `<upstream_secrets>/<server>/` (`token`, `client_secret`
    # or `private_key.pem`, by its auth type), re-read when it changes; never the user's token.
    upstream_secrets: Path = Path("/var/run/secrets/agentchat/upstreams")

    db_pool_max: int = 20
    # PostgreSQL ends a connection of ours idle this long inside a transaction (ours take
    # milliseconds): a replica frozen mid-transaction (SIGSTOP, a paused VM) would otherwise
    # keep its runs' rows locked, and a takeover skips locked rows (docs/protocol.md §4).
    # Unset: `tuning.run_lost_s`, so a frozen replica's runs are free when they are due.
    db_idle_in_transaction_s: float | None = Field(default=None, gt=0)

    # The people's page at /api/agent/ui/ (agent/api/routes/ui.py): unset means on in dev and
    # off otherwise (production serves it only behind an ingress that injects Authorization).
    ui_enabled: bool | None = None

    # The built-in Gradio page at the mount path + PAGE_SUBPATH (agent/gradio/page.py): unset means
    # on in dev and off otherwise (the Svelte panel is the product UI); off, its paths are 404.
    page_enabled: bool | None = None

    tuning: AgentTuning = Field(default_factory=AgentTuning)

    @field_validator("smtp_url")
    @classmethod
    def _smtp_url_safe(cls, value: str | None) -> str | None:
        why = smtp_refusal(value) if value else None
        if why is not None:
            raise ValueError(why)
        return value

    @field_validator("resume_key")
    @classmethod
    def _resume_keys_long_enough(cls, value: str | None) -> str | None:
        # The message names no key: the agent prints it at start.
        if value is not None and any(len(k) < RESUME_KEY_MIN_CHARS
                                     for k in resume_keys(value) or [""]):
            raise ValueError(f"AGENTCHAT_AGENT_RESUME_KEY: every key needs "
                             f"{RESUME_KEY_MIN_CHARS} characters or more")
        return value

    @property
    def mcp_resource(self) -> str:
        """The MCP endpoint's resource URL: its tokens' `aud` (RFC 8707)."""
        base = self.public_url.rstrip("/") or f"http://{self.host}:{self.port}"
        return self.mcp_audience or base + MCP_PATH

    @property
    def mcp_exchange_url(self) -> str:
        return self.mcp_token_exchange_url or self.sstools_url.rstrip("/") + "/api/auth/token"

    @property
    def ui_on(self) -> bool:
        return self.is_dev if self.ui_enabled is None else self.ui_enabled

    @property
    def page_on(self) -> bool:
        return self.is_dev if self.page_enabled is None else self.page_enabled

    def dev_only_switches(self) -> list[str]:
        """The audit trail and the run event log off: the benchmarks' baselines only."""
        off = {"audit": self.audit, f"{TUNING}.run_events": self.tuning.run_events}
        return [f"{env_name(type(self), name)}=false" for name, on in off.items() if not on]

    @model_validator(mode="after")
    def _no_placeholders_outside_dev(self) -> AgentSettings:
        if not self.is_dev and self.service_client_secret == PLACEHOLDER_SECRET:
            raise ValueError("the placeholder service client secret is refused outside dev")
        return self
