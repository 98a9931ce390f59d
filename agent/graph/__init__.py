"""The LangGraph agent and what it runs on.

    builder.py        the graph drawn: prefetch -> model -> policy -> confirm -> tools -> model ...
    state.py          AgentState (checkpointed), TurnRuntime (per turn), GraphDeps, stable ids
    nodes.py          the nodes: prefetch, model, policy (the gate's checks, agent/gate/),
                      confirm, tools (the gate's execution), answer
    verdicts.py       the confirm node's steps: each call's verdict, the card's interrupt()
    cards.py          a card's words and payload, the ToolMessages of calls that do not run
    calls.py          the model's calls: unique ids, tool schemas, alternatives' words
    prompt.py         what the model is told: the system prompt and the turn's context
    checkpoints.py    LangGraph's PostgreSQL checkpointer as the agent runs it
    model.py          the model behind it: the offline planner or an OpenAI-compatible endpoint
    offline/          the offline planner (a real BaseChatModel) and its rules; reads prompt.py
    plans.py          a step that plans a write stored before it runs, read back on a takeover
    names.py          the user's objects' names the agent has seen (cards, answers)
    taint.py          whether the model's context is untrusted (tool output, file text, a
                      UIContext name anywhere in the thread): then every write needs a card

What it may import: agent/README.md, "Module map" (tests/core/import_rules.py). Never chat or
an adapter: a node knows the turn only through its state and the LangGraph runtime context.
"""
