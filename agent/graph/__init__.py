"""The LangGraph agent and what it runs on.

    builder.py        the graph: prefetch -> model -> policy -> confirm -> tools -> model ...
    checkpoints.py    LangGraph's PostgreSQL checkpointer as the agent runs it
    model.py          the model behind it: the offline planner or an OpenAI-compatible endpoint
    offline/          the offline planner (a real BaseChatModel) and its rules
    policy_client.py  the sidecar's /v1/check (docs/protocol.md §6)
    tool_runtime.py   one catalog tool against the ss-tools API (docs/protocol.md §7)
    names.py          the user's objects' names the agent has seen (cards, answers)
    taint.py          whether the model's context is untrusted (tool output, file text, a
                      UIContext name anywhere in the thread): then every write needs a card
    service_token.py  our service JWT, from the operator's file or the ss-tools endpoint

May import: agentchat (catalog, tool_request, errors, words). Never chat, storage or api: a node
knows the turn only through its state and the LangGraph runtime context.
"""
