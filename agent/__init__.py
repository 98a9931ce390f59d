"""The agent service (agent/README.md): FastAPI with the REST API, Gradio mounted for `/chat`,
and the LangGraph agent. Its layers and what each may import are the README's "Module map".

    cli.py        `agentchat serve`, `agentchat audit`, `agentchat mcp config`
    main.py       create_app: the FastAPI app, the adapters mounted, the error handlers
    api/          the REST adapter            gradio/     the Gradio adapter (/chat, the page)
    mcp/          the MCP adapter: /api/agent/mcp, every call through the gate
    wiring.py     build_services: everything built once at start
    chat/         the chat domain behind its doors (Chat, Approvals)
    graph/        the LangGraph agent         selection/  which tools a message gets
    gate/         the gate every tool call goes through, whoever asks (a chat turn, MCP)
    audit/        the audit trail             storage/    our tables
    settings.py   AgentSettings, SelectionSettings
    metrics.py    the Prometheus metrics      csp.py      the pages' Content-Security-Policy
"""
