"""One HTTP error shape for every component's FastAPI app: `{code, detail}` (docs/protocol.md §5).

`error_response` is the answer of the app handlers and of the ASGI middlewares (an ASGI app
itself); `code_for_status` names the code of an error FastAPI or Starlette raise on their own
(an unknown path, a wrong method, an unparseable body); `validation_detail` is the one 422
wording (field names and messages only: FastAPI's default echoes the input, which may be a
secret); `install_error_handlers` puts the four handlers on an app (the agent and the sandbox).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from agentchat.errors import AgentChatError, ErrorCode, error_body

_CODES = {400: ErrorCode.INVALID_REQUEST, 401: ErrorCode.UNAUTHORIZED,
          403: ErrorCode.FORBIDDEN, 404: ErrorCode.NOT_FOUND,
          503: ErrorCode.STORAGE_UNAVAILABLE}


def code_for_status(status: int) -> ErrorCode:
    """The code of an HTTP error raised by FastAPI or Starlette (unknown path, wrong method)."""
    return _CODES.get(status, ErrorCode.INVALID_REQUEST if status < 500 else ErrorCode.INTERNAL)


def error_response(status: int, code: ErrorCode, detail: str,
                   headers: Mapping[str, str] | None = None) -> JSONResponse:
    """A `{code, detail}` response; an ASGI app too (`await error_response(...)(scope, receive,
    send)`), so the middlewares answer in the same shape."""
    return JSONResponse(error_body(code, detail), status_code=status, headers=headers)


def validation_detail(exc: RequestValidationError) -> str:
    """Where and what, for every error: `body.text: String should have at most 16384 …`."""
    return "; ".join(".".join(str(p) for p in e.get("loc", [])) + ": " + str(e.get("msg"))
                     for e in exc.errors()) or "invalid"


def install_error_handlers(app: FastAPI, log: logging.Logger,
                           unavailable: tuple[type[BaseException], ...] = ()) -> None:
    """Every error, whoever raises it, as `{code, detail}`; `unavailable`: exceptions of a
    dependency that is down (the database), 503 STORAGE_UNAVAILABLE rather than INTERNAL."""

    @app.exception_handler(AgentChatError)
    async def _agentchat_error(_: Request, exc: AgentChatError) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
        return error_response(exc.http_status, exc.code, exc.detail, headers)

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, code_for_status(exc.status_code),
                              str(exc.detail), exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(422, ErrorCode.INVALID_REQUEST, validation_detail(exc))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        if unavailable and isinstance(exc, unavailable):
            return error_response(503, ErrorCode.STORAGE_UNAVAILABLE,
                                  "the database is unreachable")
        log.error("unhandled %s", type(exc).__name__, exc_info=exc)
        return error_response(500, ErrorCode.INTERNAL, "internal error")
