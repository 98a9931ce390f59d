"""What an upstream MCP tool's answer becomes for the model (agent/gate/upstream_calls.py
`result_json`), for any answer: JSON (`structuredContent`) when there is some, else the text
blocks as they are and every other block by type and size only, never its data; at most the
cap, or `ResultTooLarge`."""

from __future__ import annotations

import base64
import json
from typing import Any

import mcp_types as types
from hypothesis import given, settings
from hypothesis import strategies as st

from agentchat.agent.gate.upstream_calls import ResultTooLarge, b64_size, result_json

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                          allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                  max_size=4),
    max_leaves=20)
mimes = st.sampled_from(["image/png", "audio/wav", "application/pdf", "text/plain"])


@st.composite
def blocks(draw: st.DrawFn) -> tuple[types.ContentBlock, bytes | str | None]:
    """A content block and what it holds (its bytes or text; None for a link)."""
    kind = draw(st.sampled_from(["text", "image", "audio", "text_resource", "blob_resource",
                                 "link"]))
    data = draw(st.binary(max_size=64))
    if kind == "text":
        text = draw(st.text(max_size=60))
        return types.TextContent(type="text", text=text), text
    b64 = base64.b64encode(data).decode()
    if kind in ("image", "audio"):
        cls = types.ImageContent if kind == "image" else types.AudioContent
        return cls(type=kind, data=b64, mime_type=draw(mimes)), data
    if kind == "text_resource":
        text = draw(st.text(max_size=60))
        return types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
            uri="file:///x", mime_type=draw(mimes), text=text)), text.encode()
    if kind == "blob_resource":
        return types.EmbeddedResource(type="resource", resource=types.BlobResourceContents(
            uri="file:///x", mime_type=draw(mimes), blob=b64)), data
    return types.ResourceLink(type="resource_link", name="x", uri="https://evil.example/x",
                              mime_type=draw(mimes), size=draw(st.none() | st.integers(0, 99))
                              ), None


@settings(max_examples=200)
@given(st.lists(blocks(), max_size=6), st.none() | st.dictionaries(st.text(max_size=8),
                                                                   json_values, max_size=4),
       st.integers(min_value=16, max_value=4000))
def test_text_and_json_only_by_type_and_size_otherwise_and_capped(
        content: list[tuple[types.ContentBlock, Any]], structured: dict[str, Any] | None,
        cap: int) -> None:
    result = types.CallToolResult(content=[b for b, _ in content],
                                  structured_content=structured)
    try:
        out = result_json(result, cap)
    except ResultTooLarge:
        whole = result_json(result, 10**9)  # the same answer, uncapped, is over the cap
        assert len(json.dumps(whole, ensure_ascii=False).encode()) > cap
        return
    assert len(json.dumps(out, ensure_ascii=False).encode()) <= cap
    if structured is not None:
        assert out == structured  # the JSON is preferred to its text copy
        return
    if len(content) == 1 and isinstance(content[0][0], types.TextContent):
        try:
            held = json.loads(content[0][1])
        except ValueError:
            held = None
        if isinstance(held, dict):
            assert out == held  # one block of JSON text: the object it holds
            return
    assert len(out["content"]) == len(content)
    for got, (block, held) in zip(out["content"], content, strict=True):
        if isinstance(block, types.TextContent):
            assert got == {"type": "text", "text": held}
            continue
        # Anything else by type and size: never its data, text or link.
        assert set(got) == {"type", "mimeType", "bytes"} and got["type"] == block.type
        assert got["bytes"] == (block.size if isinstance(block, types.ResourceLink)
                                else len(held))


@given(st.binary(max_size=300))
def test_base64_size_is_the_decoded_size(data: bytes) -> None:
    assert b64_size(base64.b64encode(data).decode()) == len(data)


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=4),
       st.sampled_from(["", " ", "\n"]))
def test_one_block_of_json_text_is_the_object_it_holds(held: dict[str, Any], pad: str) -> None:
    text = pad + json.dumps(held, ensure_ascii=False) + pad
    one = types.CallToolResult(content=[types.TextContent(type="text", text=text)])
    assert result_json(one, 10**9) == held
    # Two blocks, or a JSON array or scalar: the blocks as they are.
    two = types.CallToolResult(content=[types.TextContent(type="text", text=text)] * 2)
    assert result_json(two, 10**9) == {"content": [{"type": "text", "text": text}] * 2}
    listing = types.CallToolResult(content=[types.TextContent(type="text", text="[1, 2]")])
    assert result_json(listing, 10**9) == {"content": [{"type": "text", "text": "[1, 2]"}]}


def test_a_ten_megabyte_answer_is_refused_not_kept() -> None:
    big = types.CallToolResult(content=[], structured_content={"items": ["x" * 1000] * 10_000})
    try:
        result_json(big, 1024 * 1024)
    except ResultTooLarge as e:
        assert "over 1048576" in str(e)
    else:
        raise AssertionError("a 10 MB result passed a 1 MB cap")
