"""Outbound HTTP clients that keep no cookie.

One client serves every user of a process (the ss-tools API, the policy sidecar, the model,
the approval webhook, the service-token endpoint, the llm-status probe, the embeddings
endpoint), and httpx keeps the cookies a server sets in its client's jar by default: a
session cookie ss-tools (Superset's Flask session) set on alice's request would go out on
bob's next one. Every outbound client is built here, over a jar whose policy refuses every
cookie both ways: nothing is stored from a response, and nothing stored is ever sent.
"""

from __future__ import annotations

import http.cookiejar
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from agentchat.http_pool import PooledTransport

ClientT = TypeVar("ClientT")


class RefuseEveryCookie(http.cookiejar.DefaultCookiePolicy):
    """Neither keeps a cookie from a response nor returns one with a request."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: urllib.request.Request) -> bool:
        return False

    def return_ok(self, cookie: http.cookiejar.Cookie, request: urllib.request.Request) -> bool:
        return False


def cookieless_jar() -> http.cookiejar.CookieJar:
    """A jar that stays empty: what every outbound client of ours is given."""
    return http.cookiejar.CookieJar(policy=RefuseEveryCookie())


def no_cookie_client(cls: Callable[..., ClientT], /, **kwargs: Any) -> ClientT:
    """`cls(**kwargs)` over a jar that keeps no cookie: httpx's clients, or a library's own
    (the `openai` SDK's default clients, which the model and the embeddings use)."""
    return cls(cookies=cookieless_jar(), **kwargs)


def async_client(*, limits: httpx.Limits | None = None, **kwargs: Any) -> httpx.AsyncClient:
    """An httpx client over httpcore2's connection pool (agentchat/http_pool.py): the same
    client, exceptions and spans, a pool whose cost does not grow with its idle connections."""
    return no_cookie_client(httpx.AsyncClient, transport=PooledTransport(limits), **kwargs)


def sync_client(**kwargs: Any) -> httpx.Client:
    return no_cookie_client(httpx.Client, **kwargs)
