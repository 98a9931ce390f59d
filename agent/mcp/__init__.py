"""The MCP adapter: ss-tools' catalog as an MCP server at `POST /api/agent/mcp`, every call
through the same gate as a chat call (the chat door's `GatedCalls`), for Claude Code, Cursor
or any agent that speaks the Model Context Protocol (docs/protocol.md §12). Beside the REST
(`api/`) and Gradio (`gradio/`) adapters; of the domain, only its door.

    endpoint.py  mount: the route (the SDK's stateless Streamable HTTP transport, both protocol
                 eras) and the metadata on the app; Endpoint.running() in the app's lifespan
    guard.py     what each request passes first: Origin (403), the bearer for this resource
                 only (401 with the RFC 9728 challenge), calls a minute (429), the caller's
                 ss-tools user token; CallerContext on the ASGI scope
    exchange.py  TokenExchange: the MCP token exchanged (RFC 8693) for an ss-tools user token,
                 kept until shortly before it expires; the bearer never leaves the agent
    metadata.py  GET /.well-known/oauth-protected-resource/api/agent/mcp (RFC 9728)
    server.py    the SDK's low-level Server: tools/list, tools/call through GatedCalls
    tools.py     the caller's tools as MCP tools (schema, words, risk annotations) and the
                 gateway's own `agentchat_call_result`
    results.py   an outcome as a CallToolResult; a card asked inline as an InputRequiredResult

May import: wiring, the chat door (agent/chat/__init__.py), the shared modules.
Imported by: agent/main.py.
"""
