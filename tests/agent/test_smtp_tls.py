"""Approval e-mail over SMTP keeps its TLS promises (agent/chat/mail.py), against real local
SMTP servers (aiosmtpd) with a self-signed certificate for `localhost`:

- STARTTLS and implicit TLS (`smtps://`) verify the certificate: refused unless
  AGENTCHAT_AGENT_SMTP_CA_FILE trusts it, and refused for another host name even then;
- trusted, the message arrives, the login (percent-decoded from the URL) after TLS only;
- `smtp+starttls://` to a server that offers no STARTTLS sends nothing (no fallback);
- `smtp://user:pass@…` (a login in the clear) is refused at start, naming no part of the URL.
"""

from __future__ import annotations

import datetime as dt
import smtplib
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import ValidationError

from agentchat.agent.chat import mail
from agentchat.agent.settings import AgentSettings
from testkit.support import free_port


@dataclass
class Mailbox:
    got: list[bytes] = field(default_factory=list)
    logins: list[tuple[str, str]] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.got.append(envelope.content)
        return "250 OK"

    def __call__(self, server: Any, session: Any, envelope: Any, mechanism: str,
                 auth_data: Any) -> AuthResult:
        assert isinstance(auth_data, LoginPassword)
        self.logins.append((auth_data.login.decode(), auth_data.password.decode()))
        return AuthResult(success=True)


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for the name `localhost` only (not 127.0.0.1)."""
    folder = tmp_path_factory.mktemp("smtp-tls")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(hours=1))
                   .not_valid_after(now + dt.timedelta(days=1))
                   .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]),
                                  critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None),
                                  critical=True)
                   .sign(key, hashes.SHA256()))
    pem, key_pem = folder / "cert.pem", folder / "key.pem"
    pem.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return pem, key_pem


def server(box: Mailbox, cert: tuple[Path, Path] | None, *, implicit: bool = False
           ) -> tuple[Controller, int]:
    port = free_port()
    kw: dict[str, Any] = {}
    if cert is not None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(*cert)
        # Implicit TLS is TLS from the first byte: aiosmtpd's own check knows only STARTTLS.
        kw = ({"ssl_context": ctx, "auth_require_tls": False} if implicit
              else {"tls_context": ctx, "require_starttls": True})
    controller = Controller(box, hostname="127.0.0.1", port=port, authenticator=box,
                            server_hostname="localhost", **kw)
    controller.start()
    return controller, port


@pytest.fixture(params=["smtp+starttls", "smtps"])
def tls_server(request: pytest.FixtureRequest, cert: tuple[Path, Path]
               ) -> Iterator[tuple[str, Mailbox, int]]:
    box = Mailbox()
    controller, port = server(box, cert, implicit=request.param == "smtps")
    yield request.param, box, port
    controller.stop()


def message() -> EmailMessage:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "agentchat@example.com", "ops@example.com", "hi"
    msg.set_content("approve it")
    return msg


def test_tls_is_verified_and_the_login_goes_only_over_it(
        tls_server: tuple[str, Mailbox, int], cert: tuple[Path, Path]) -> None:
    scheme, box, port = tls_server
    url = f"{scheme}://agent:p%40ss@localhost:{port}"
    with pytest.raises(ssl.SSLCertVerificationError, match=r"self-signed|self signed"):
        mail.send(url, message())  # the system's authorities do not know it
    with pytest.raises(ssl.SSLCertVerificationError, match=r"match|mismatch"):
        mail.send(f"{scheme}://agent:p%40ss@127.0.0.1:{port}", message(), ca_file=cert[0])
    assert box.got == [] and box.logins == []
    mail.send(url, message(), ca_file=cert[0])
    assert len(box.got) == 1 and b"approve it" in box.got[0]
    assert box.logins == [("agent", "p@ss")]


def test_starttls_never_falls_back_to_plain_text(cert: tuple[Path, Path]) -> None:
    box = Mailbox()
    controller, port = server(box, None)  # offers no STARTTLS
    try:
        with pytest.raises(smtplib.SMTPNotSupportedError):
            mail.send(f"smtp+starttls://agent:secret@localhost:{port}", message(),
                      ca_file=cert[0])
        assert box.got == [] and box.logins == []
        mail.send(f"smtp://localhost:{port}", message())  # plain and no login: allowed
        assert len(box.got) == 1 and box.logins == []
    finally:
        controller.stop()


def test_a_login_without_tls_is_refused_at_start() -> None:
    for url in ("smtp://agent:hunter2-secret@mail.example.com:25",
                "smtp://agent@mail.example.com"):
        with pytest.raises(ValidationError) as refused:
            AgentSettings(mode="dev", smtp_url=url)
        said = str(refused.value)
        assert "a login needs TLS; use smtp+starttls:// or smtps://" in said
        assert "hunter2" not in said and "mail.example.com" not in said
        with pytest.raises(ValueError, match="login needs TLS"):
            mail.send(url, message())  # and the sender itself never tries
    for ok in ("smtps://agent:x@mail.example.com", "smtp+starttls://agent:x@mail.example.com",
               "smtp://mail.example.com:25"):
        assert AgentSettings(mode="dev", smtp_url=ok).smtp_url == ok
