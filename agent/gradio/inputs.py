"""The `/chat` inputs (docs/protocol.md §1): parse, apply the message-level fields, check limits."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from agentchat.agent.chat import ACTIONS, ID_PATTERN, ChatRequest, UIContext, UploadBook, upload_key
from agentchat.agent.settings import AgentSettings
from agentchat.errors import AgentChatError, ErrorCode


def _invalid(detail: str) -> AgentChatError:
    return AgentChatError(ErrorCode.INVALID_REQUEST, detail)


def _opt_str(value: Any, name: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _invalid(f"{name} must be a string")
    return value


def parse_request(settings: AgentSettings, book: UploadBook, message: Any, action: Any,
                  conversation_id: Any, uicontext: Any, user_id: Any, user_jwt: Any,
                  env_id: Any) -> ChatRequest:
    fields: dict[str, Any] = {}
    files: list[Any] = []
    if isinstance(message, str) or message is None:
        text = message or ""
    elif isinstance(message, dict):
        text = message.get("text") or ""
        files = message.get("files") or []
        fields = {k: message.get(k) for k in ("action", "conversation_id", "confirm_id",
                                              "run_id", "last_seq", "tab_id", "message_id",
                                              "approve")}
    else:
        raise _invalid("message must be a string or {text, files}")
    if not isinstance(text, str):
        raise _invalid("message text must be a string")
    # Fields inside the message only fill the slots that are null.
    action = action if action not in (None, "") else fields.get("action")
    conversation_id = conversation_id if conversation_id not in (None, "") else fields.get(
        "conversation_id")
    req = ChatRequest(
        text=text,
        action=_opt_str(action, "action"),
        conversation_id=_opt_str(conversation_id, "conversation_id"),
        uicontext=None,
        user_id=_opt_str(user_id, "user_id"),
        user_jwt=_opt_str(user_jwt, "user_jwt"),
        env_id=_opt_str(env_id, "env_id"),
        confirm_id=_opt_str(fields.get("confirm_id"), "confirm_id"),
        run_id=_opt_str(fields.get("run_id"), "run_id"),
        last_seq=_last_seq(fields.get("last_seq")),
        tab_id=_opt_str(fields.get("tab_id"), "tab_id"),
        message_id=_opt_str(fields.get("message_id"), "message_id"),
        approve=_approve(fields.get("approve")),
    )
    if req.action not in ACTIONS:
        raise _invalid(f"unknown action {req.action!r}")
    if req.approve is not None and req.action != "confirm":
        raise _invalid("approve goes with action confirm")
    for name in ("conversation_id", "run_id", "tab_id", "message_id"):
        value = getattr(req, name)
        if value is not None and not ID_PATTERN.match(value):
            raise _invalid(f"{name} is malformed")
    if req.action in ("join", "edit", "regenerate") and req.conversation_id is None:
        raise _invalid(f"{req.action} needs the conversation_id")
    if req.action == "edit" and (req.message_id is None or not text.strip()):
        raise _invalid("edit needs the message_id and the new text")
    if req.env_id is not None and len(req.env_id) > 64:
        raise _invalid("env_id is too long")
    if len(text.encode()) > settings.tuning.max_text_bytes:
        raise _invalid(f"the message is over {settings.tuning.max_text_bytes // 1024} KB")
    if req.action is None and not text.strip() and not files:
        raise _invalid("the message is empty")
    req.uicontext = _parse_uicontext(settings, uicontext)
    req.files = _parse_files(settings, book, files)
    # PostgreSQL's text and jsonb cannot hold NUL: refuse it here rather than fail the insert.
    strings = [req.text, req.env_id, req.user_id, req.confirm_id, req.message_id,
               *(v for v in (req.uicontext or {}).values() if isinstance(v, str))]
    if any(s is not None and "\x00" in s for s in strings):
        raise _invalid("the message contains a NUL character")
    return req


def _approve(value: Any) -> list[str] | None:
    """A batched card's confirm: the call ids that run (docs/protocol.md §3)."""
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) > 64
            or not all(isinstance(v, str) and ID_PATTERN.match(v) for v in value)):
        raise _invalid("approve must be a list of call ids")
    return list(dict.fromkeys(value))


def _last_seq(value: Any) -> int:
    if value is None or value == "":
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        raise _invalid("last_seq must be a whole number from 0")
    return value


def _parse_uicontext(settings: AgentSettings, raw: Any) -> dict[str, Any] | None:
    if raw in (None, ""):
        return None
    if isinstance(raw, dict):
        raw = json.dumps(raw)
    if not isinstance(raw, str):
        raise _invalid("uicontext must be a JSON string")
    if len(raw.encode()) > settings.tuning.max_uicontext_bytes:
        raise _invalid(f"the UIContext is over {settings.tuning.max_uicontext_bytes // 1024} KB")
    try:
        ctx = UIContext.model_validate_json(raw)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise _invalid(f"bad UIContext: {where}: {first['msg']}") from None
    if ctx.contextVersion != 1:
        raise _invalid("bad UIContext: contextVersion must be 1")
    return ctx.model_dump()


def _parse_files(settings: AgentSettings, book: UploadBook, files: Any) -> list[dict[str, Any]]:
    """Only Gradio file objects of this process's uploads (`book`); no file system access here (the
    reading is `file_text`'s, in a thread). A client's `size` is never believed."""
    if not isinstance(files, list):
        raise _invalid("files must be a list")
    if len(files) > settings.tuning.max_files:
        raise _invalid(f"at most {settings.tuning.max_files} files")
    out = []
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("path"), str):
            raise _invalid("a file must be a Gradio file object from …/gradio_api/upload")
        path = f["path"]
        key = upload_key(path)
        if key is None or not book.known(key):
            raise _invalid("a file was not uploaded through …/gradio_api/upload")
        name = f.get("orig_name")
        name = name if isinstance(name, str) and name else path
        # The name goes into the message: the last part only (the Node client sends the
        # sender's local path), no NUL (PostgreSQL text refuses it), one line.
        name = name.replace("\\", "/").rsplit("/", 1)[-1]
        name = "".join(c for c in name if c.isprintable())[:255] or "file"
        out.append({"name": name, "path": path, "key": key})
    return out
