"""The approvals' notifications, delivered from the outbox (docs/protocol.md §11):
never on a turn's path, at least once, retried with backoff.

Each replica runs one loop: it tells expired and escalated approvals (a conditional update
writes their notifications), claims due notifications (storage/outbox.py) and sends each on
every configured channel it has not yet reached:

    webhook   POST JSON to AGENTCHAT_AGENT_APPROVAL_WEBHOOK_URL (its `text` made inert for
              Slack and Mattermost: notice_text.py; the other fields raw data), signed:
              `X-AgentChat-Timestamp: <unix seconds>` and `X-AgentChat-Signature:
              sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">` under
              AGENTCHAT_AGENT_APPROVAL_WEBHOOK_SECRET; any 2xx is delivered
    email     SMTP (AGENTCHAT_AGENT_SMTP_URL; STARTTLS or implicit TLS verified, no login
              without TLS: mail.py), plain text and HTML, to the environment's recipients
              (the escalation recipients for an escalation)

A channel not configured (or with no recipient) counts as done. The link in a notification
carries no authority: the approver signs in on the page it opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import html
import json
import logging
import time
from email.message import EmailMessage
from typing import Any
from urllib.parse import urlsplit

import httpx

from agentchat.agent.audit.trail import AuditTrail
from agentchat.agent.chat import mail
from agentchat.agent.chat.notice_text import summary
from agentchat.agent.settings import AgentSettings
from agentchat.agent.storage import approvals as approval_records
from agentchat.agent.storage import outbox
from agentchat.agent.storage.db import Db, Row

log = logging.getLogger("agentchat.agent")

MAX_BACKOFF_S = 300.0
CLAIM_LEASE_S = 60.0


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """`sha256=<hex>` of HMAC-SHA256 over `<timestamp>.<body>` (the receiver recomputes it)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class Notifications:
    def __init__(self, settings: AgentSettings, pool: Db, http: httpx.AsyncClient,
                 audit: AuditTrail | None = None) -> None:
        self.settings = settings
        self.pool = pool
        self.http = http
        self.audit = audit
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="approval-notifications")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # the database away: the next tick tries again
                log.warning("approval notifications: a round failed", exc_info=True)
            await asyncio.sleep(self.settings.tuning.outbox_poll_s)

    async def run_once(self) -> None:
        await outbox.mark_due(self.pool)
        for row in await outbox.claim(self.pool, limit=20, lease_s=CLAIM_LEASE_S):
            await self.deliver(row)

    async def deliver(self, row: Row) -> None:
        body = {"id": row["id"], "event": row["event"], **row["body"]}
        path = str(body.get("approve_url") or "")
        body["approve_url"] = self.settings.public_url.rstrip("/") + path
        body["text"] = summary(body, body["approve_url"])
        left, sent, errors = [], [], []
        for channel in row["channels"]:
            try:
                where = await (self._webhook(body) if channel == "webhook"
                               else self._email(body))
            except Exception as e:  # any failure: retried later
                left.append(channel)
                errors.append(f"{channel}: {type(e).__name__}: {str(e)[:200]}")
                continue
            if where:
                sent.append({"channel": channel, "to": where, "at": time.time()})
        backoff = min(self.settings.tuning.outbox_retry_s * 2 ** int(row["attempts"]),
                      MAX_BACKOFF_S)
        await outbox.done(self.pool, row["id"], left=left, sent=sent,
                          error="; ".join(errors) or None, retry_s=backoff)
        if sent:
            await self._audit(row, sent)

    async def _audit(self, row: Row, sent: list[dict[str, Any]]) -> None:
        """Each delivery on the call's audit record (a `notification` stage), so the record
        joins what was sent where with the request, the answers and the execution."""
        if self.audit is None:
            return
        # A chat card's approval or a stored MCP call's: the call's record either way.
        approval = await approval_records.get_approval(self.pool, str(row["approval_id"]))
        if approval is None:  # its conversation is gone
            return
        ref = await self.audit.record_of(approval["conversation_id"], approval["call_id"])
        if ref is None:
            return
        await self.audit.append([ref.entry("notification", {
            "notification_id": row["id"], "event": row["event"], "channel": s["channel"],
            "to": s["to"]}) for s in sent])

    async def _webhook(self, body: dict[str, Any]) -> str | None:
        url, secret = self.settings.approval_webhook_url, self.settings.approval_webhook_secret
        if not url or not secret:
            return None
        raw = json.dumps(body, ensure_ascii=False, default=str).encode()
        stamp = str(int(time.time()))
        resp = await self.http.post(url, content=raw, timeout=5.0, headers={
            "Content-Type": "application/json", "X-AgentChat-Timestamp": stamp,
            "X-AgentChat-Signature": sign(secret, stamp, raw)})
        if not 200 <= resp.status_code < 300:
            raise RuntimeError(f"the webhook answered {resp.status_code}")
        return urlsplit(url).netloc

    def recipients(self, body: dict[str, Any]) -> list[str]:
        table = (self.settings.approval_escalation_email_to
                 if body.get("event") == "approval_escalated"
                 else self.settings.approval_email_to)
        env = str(body.get("environment") or "")
        return list(table.get(env) or table.get("*") or [])

    async def _email(self, body: dict[str, Any]) -> str | None:
        to = self.recipients(body)
        if not self.settings.smtp_url or not to:
            return None
        text = summary(body, body["approve_url"], chat=False)  # the webhook's is chat-escaped
        msg = EmailMessage()
        msg["From"] = self.settings.smtp_from
        msg["To"] = ", ".join(to)
        msg["Subject"] = f"[AgentChat] {text[:150]}"
        msg["X-AgentChat-Notification"] = str(body["id"])
        facts = [f"{k}: {body.get(k)}" for k in ("event", "requester", "tool_name",
                                                 "environment", "risk", "expires_at",
                                                 "args_digest")]
        msg.set_content("\n".join([text, "", *facts, "", body["approve_url"]]) + "\n")
        link = html.escape(body["approve_url"], quote=True)
        msg.add_alternative(
            f"<p>{html.escape(text)}</p><ul>"
            + "".join(f"<li>{html.escape(line)}</li>" for line in facts)
            + f"</ul><p><a href=\"{link}\">{link}</a></p>", subtype="html")
        await asyncio.to_thread(mail.send, self.settings.smtp_url, msg,
                                ca_file=self.settings.smtp_ca_file)
        return ", ".join(to)
