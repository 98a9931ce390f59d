"""E-mail out over SMTP, for the approvals' notifications (notify.py, docs/protocol.md §11).

`AGENTCHAT_AGENT_SMTP_URL` names the transport:

    smtp://host[:25]                        plain, no login: the settings refuse credentials
    smtp+starttls://[user:pass@]host[:587]  STARTTLS, required (a server offering none fails)
    smtps://[user:pass@]host[:465]          TLS from the first byte (implicit TLS)

TLS is `ssl.create_default_context()`: the certificate verified against the system's
authorities, or only against `AGENTCHAT_AGENT_SMTP_CA_FILE` when set (a private CA, a
self-signed server), and the host name checked. Credentials are percent-decoded from the URL
and sent only over TLS. Blocking (smtplib): the caller runs it in a thread.
"""

from __future__ import annotations

import smtplib
import ssl
from email.message import EmailMessage
from pathlib import Path
from urllib.parse import unquote, urlsplit

from agentchat.agent.settings import smtp_refusal

# As the chart's egress rule assumes (charts/agentchat/values.yaml, networkPolicy.egress.smtp).
DEFAULT_PORTS = {"smtps": 465, "smtp+starttls": 587, "smtp": 25}


def tls_context(ca_file: Path | None = None) -> ssl.SSLContext:
    """Verified, host name checked; trusting only `ca_file` when one is given."""
    return ssl.create_default_context(cafile=str(ca_file) if ca_file else None)


def send(url: str, msg: EmailMessage, *, ca_file: Path | None = None,
         timeout_s: float = 10.0) -> None:
    """Send one message; any failure raises (the outbox retries it later)."""
    why = smtp_refusal(url)
    if why is not None:  # the settings refused it already; never send in the clear here
        raise ValueError(why)
    parts = urlsplit(url)
    host = parts.hostname or ""
    context = tls_context(ca_file)
    port = parts.port or DEFAULT_PORTS[parts.scheme]
    smtp = (smtplib.SMTP_SSL(host, port, timeout=timeout_s, context=context)
            if parts.scheme == "smtps" else smtplib.SMTP(host, port, timeout=timeout_s))
    with smtp:
        if parts.scheme == "smtp+starttls":
            smtp.starttls(context=context)
        if parts.username:
            smtp.login(unquote(parts.username), unquote(parts.password or ""))
        smtp.send_message(msg)
