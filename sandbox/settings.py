"""Settings of the sandbox ss-tools API (AGENTCHAT_SANDBOX_<NAME>, the convention of
agentchat/settings.py), on top of the shared ones; sandbox/README.md lists them."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from agentchat.settings import SharedSettings

# Accepted only with AGENTCHAT_MODE=dev; production needs a real AGENTCHAT_SANDBOX_CLIENT_SECRET.
PLACEHOLDER_CLIENT_SECRET = "dev-client-secret"


class SandboxSettings(SharedSettings):
    """The stand-in ss-tools API: bind address, the service-token client, faults, task pace."""

    # A refused setting must not echo the environment (the client secret) into the error.
    model_config = SettingsConfigDict(hide_input_in_errors=True)

    host: str = "127.0.0.1"
    port: int = 8800
    # The one client allowed to obtain service tokens at POST /api/auth/service-token; its id
    # becomes the token's `sub`, i.e. the `service_actor` of the audit.
    client_id: str = "agentchat-agent"
    client_secret: SecretStr | None = None
    # Fault injection and reset; None means "on in dev mode, off in production".
    faults_enabled: bool | None = None
    # Seconds an asynchronous task spends queued, then running, before it succeeds.
    task_step_s: float = Field(default=1.0, ge=0, le=3600)

    # Simulated backend time of each write or destructive call (0 in tests unless asked for).
    write_latency_s: float = Field(default=0.05, ge=0, le=60)

    @model_validator(mode="after")
    def _fail_closed_outside_dev(self) -> SandboxSettings:
        if self.is_dev:
            if self.faults_enabled is None:
                self.faults_enabled = True
            if self.client_secret is None:
                self.client_secret = SecretStr(PLACEHOLDER_CLIENT_SECRET)
            return self
        if self.faults_enabled:
            raise ValueError("AGENTCHAT_SANDBOX_FAULTS_ENABLED is refused outside dev mode")
        self.faults_enabled = False
        secret = self.client_secret.get_secret_value() if self.client_secret else ""
        if secret in ("", PLACEHOLDER_CLIENT_SECRET):
            raise ValueError(
                "AGENTCHAT_SANDBOX_CLIENT_SECRET must be set (not the dev placeholder) "
                "outside dev mode"
            )
        return self
