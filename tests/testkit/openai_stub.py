"""A local OpenAI-compatible chat-completions server for the production model path.

It answers `POST /v1/chat/completions` (streamed or not) by asking the offline planner what
to say, so `ChatOpenAI` gets real streamed text and tool-call deltas over HTTP. Failure modes
for the LLM fault tests: `mode` = ok | refuse (HTTP 500) | hang | cut (stream cut halfway);
`obey` answers like ok but follows instructions planted in tool results (obedient.py).

A hostile model for the gate tests: `POST /script {"turns": [[call, ...], ...]}` queues what
the model says next, one list of tool calls per model request, each call
`{name, args, id}` (`id` may be missing, null or repeated; `raw_args` sends a string as is).
After the tool results it answers `ANSWER: ` and every tool result it got, so a test can see
what reached the model. With `"fresh_only": true` the queued replies go only to requests that
end with the user's message (a step's first ask): asked the same thing again, the model
answers the next one (a model that answers differently each time it is asked).
`GET /seen` lists the tool results and tools offered per request (`left`: replies still
queued); `GET /received` the system prompts and tool descriptions of the last requests (the words a
real model would get), `DELETE /received` forgets them.
Run: `python tests/testkit/openai_stub.py PORT [MODE]`. `OPENAI_STUB_TOKEN_DELAY_S` paces its
streamed chunks (default 0.005 s after each; bench/agent_scale.py --model http: a model at 30
tokens/s that the agent and its peer both call).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

import uvicorn
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agentchat.agent.graph.offline.planner import OfflinePlanner, _chunks
from testkit.obedient import obey

STATE: dict[str, Any] = {"mode": "ok", "requests": 0, "script": [], "seen": [],
                         "received": [], "fresh_only": False,
                         "token_delay_s": float(os.environ.get("OPENAI_STUB_TOKEN_DELAY_S",
                                                               "0.005"))}


def scripted(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
    """The scripted reply for this request as (text, calls), or None to use the planner."""
    last = messages[-1] if messages else {}
    offered = [t["function"]["name"] for t in tools]
    fresh = last.get("role") == "user" or not STATE["fresh_only"]
    if STATE["script"] and fresh:  # the next scripted reply, whatever came before (a prefetch)
        STATE["seen"].append({"offered": offered, "results": []})
        return "", STATE["script"].pop(0)
    if last.get("role") == "tool" and STATE["seen"]:
        results = []
        for m in reversed(messages):
            if m.get("role") != "tool":
                break
            results.insert(0, m.get("content") or "")
        STATE["seen"][-1]["results"].extend(results)
        return "ANSWER: " + " | ".join(results), []
    return None


def to_langchain(messages: list[dict[str, Any]]) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i, m in enumerate(messages):
        role, content = m["role"], m.get("content") or ""
        if role == "system":
            out.append(SystemMessage(content))
        elif role == "user":
            out.append(HumanMessage(content, id=f"u{i}-{hash(content) & 0xffff}"))
        elif role == "assistant":
            calls = [{"name": c["function"]["name"], "args": json.loads(c["function"]["arguments"]),
                      "id": c["id"], "type": "tool_call"} for c in m.get("tool_calls") or []]
            out.append(AIMessage(content, tool_calls=calls, name=m.get("name")))
        elif role == "tool":
            out.append(ToolMessage(content, tool_call_id=m["tool_call_id"]))
    return out


async def completions(request: Request) -> Response:
    STATE["requests"] += 1
    body = await request.json()
    STATE["received"] = [*STATE["received"][-49:], {
        "system": [m.get("content") or "" for m in body["messages"] if m["role"] == "system"],
        "user": [m.get("content") or "" for m in body["messages"] if m["role"] == "user"],
        "tools": [{"name": t["function"]["name"],
                   "description": t["function"].get("description") or ""}
                  for t in body.get("tools", [])]}]
    mode = STATE["mode"]
    if mode == "refuse":
        return JSONResponse({"error": {"message": "overloaded", "type": "server_error"}},
                            status_code=500)
    if mode == "hang":
        await asyncio.sleep(3600)
    script = scripted(body["messages"], body.get("tools", []))
    if script is not None:
        return _scripted_reply(body, *script)
    history = to_langchain(body["messages"])
    plan = (obey(history, body.get("tools", [])) if mode == "obey" else None) \
        or OfflinePlanner().plan(history, body.get("tools", []))
    base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": body.get("model", "stub")}
    if not body.get("stream"):
        msg: dict[str, Any] = {"role": "assistant", "content": plan.content or None}
        if plan.tool_calls:
            msg["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                "name": c["name"], "arguments": json.dumps(c["args"])}} for c in plan.tool_calls]
        return JSONResponse({**base, "object": "chat.completion", "choices": [
            {"index": 0, "message": msg, "finish_reason": "tool_calls" if plan.tool_calls
             else "stop"}]})

    async def stream() -> Any:
        chunks = list(_chunks(plan))
        for n, gen in enumerate(chunks):
            if mode == "cut" and n >= max(1, len(chunks) // 2):
                raise ConnectionResetError("stream cut")  # the server drops the connection
            delta: dict[str, Any] = {}
            if gen.text:
                delta["content"] = gen.text
            for tc in gen.message.tool_call_chunks:  # type: ignore[attr-defined]
                delta["tool_calls"] = [{"index": tc["index"], "id": tc["id"], "type": "function",
                                        "function": {"name": tc["name"],
                                                     "arguments": tc["args"]}}]
            if delta:
                chunk = {**base, "choices": [{"index": 0, "delta": delta,
                                              "finish_reason": None}]}
                yield f"data: {json.dumps(chunk)}\n\n"
                await asyncio.sleep(STATE["token_delay_s"])
        done = {**base, "choices": [{"index": 0, "delta": {},
                                     "finish_reason": "tool_calls" if plan.tool_calls
                                     else "stop"}]}
        yield f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream")


def _scripted_reply(body: dict[str, Any], text: str, calls: list[dict[str, Any]]) -> Response:
    """Streamed like a real endpoint: the text, then one delta per call (id as scripted)."""
    base = {"id": "chatcmpl-script", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": body.get("model", "stub")}

    async def stream() -> Any:
        if text:
            delta: dict[str, Any] = {"role": "assistant", "content": text}
            yield f"data: {json.dumps({**base, 'choices': [{'index': 0, 'delta': delta}]})}\n\n"
        for n, call in enumerate(calls):
            args = call.get("raw_args", json.dumps(call.get("args", {})))
            tc: dict[str, Any] = {"index": n, "type": "function",
                                  "function": {"name": call["name"], "arguments": args}}
            if call.get("id") is not None:
                tc["id"] = call["id"]
            chunk = {**base, "choices": [{"index": 0, "delta": {"tool_calls": [tc]}}]}
            yield f"data: {json.dumps(chunk)}\n\n"
        done = {**base, "choices": [{"index": 0, "delta": {},
                                     "finish_reason": "tool_calls" if calls else "stop"}]}
        yield f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream")


async def set_script(request: Request) -> Response:
    body = await request.json()
    STATE["script"] = list(body["turns"])
    STATE["fresh_only"] = bool(body.get("fresh_only"))
    STATE["seen"] = []
    return JSONResponse({"queued": len(STATE["script"])})


async def seen(request: Request) -> Response:
    return JSONResponse({"seen": STATE["seen"], "left": len(STATE["script"])})


async def received(request: Request) -> Response:
    if request.method == "DELETE":
        STATE["received"] = []
    return JSONResponse({"received": STATE["received"]})


async def models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [{"id": "stub", "object": "model"}]})


async def set_mode(request: Request) -> Response:
    STATE["mode"] = (await request.json())["mode"]
    return JSONResponse(STATE)


app = Starlette(routes=[
    Route("/v1/chat/completions", completions, methods=["POST"]),
    Route("/v1/models", models),
    Route("/mode", set_mode, methods=["POST"]),
    Route("/script", set_script, methods=["POST"]),
    Route("/seen", seen),
    Route("/received", received, methods=["GET", "DELETE"]),
    Route("/livez", models),
])

if __name__ == "__main__":
    STATE["mode"] = sys.argv[2] if len(sys.argv) > 2 else "ok"
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
