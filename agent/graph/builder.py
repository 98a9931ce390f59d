"""The agent graph: model → policy → confirm → tools → model … (drawn here; its parts:
state.py, nodes.py, verdicts.py, cards.py, calls.py).

- `model` streams tokens (the only node whose tokens reach the user) and plans tool calls
  from the tools selected for this turn.
- `model` also gives every call an id unique within the conversation before the message is
  checkpointed (a model that repeats `call_0`, or sends none, cannot make one decision cover
  another call).
- `policy` refuses calls to tools not offered this turn and arguments that fail the tool's
  schema (`tool_error {reason: "invalid_arguments"}`, nothing sent), then asks the sidecar about
  every other call, with exactly the validated arguments, before any runs; it keeps the
  decisions in the state, so a resumed run never asks again. Once anything from outside the
  user's own words is in the model's context, in this turn or an earlier one
  (agent/graph/taint.py), every check says so and every write needs a card.
- `confirm` turns each decision that needs a human into an `interrupt()` whose value is the
  `confirm_required` card, one at a time and in order. It has no side effects before its
  interrupts: the node re-runs from its start on every resume.
- `tools` runs the approved calls through the tool runtime; refused ones already have their
  ToolMessage.
- `answer` ends a pass whose card someone else approved or denied (docs/protocol.md §11): the
  turn then runs under the approver's token, which serves only the calls they approved, so
  `confirm` drops any other and, after them, the model answers with no tool offered.
- `prefetch` (first, when the turn has prefetch calls) is an ordinary tool call made by the
  agent: it goes through policy, confirm and tools like any other.

Audit (agent/audit/trail.py): `policy` appends each audited call's decision,
`confirm` why a call it refuses does not run, `tools` each execution (and sends the decision's
id with it); cards and answers are appended where they are stored. Spans: one per node
(`agentchat.graph.<node>`; the model node's is its own), one per card (`agentchat.card`).

Words (agentchat/words.py): everything said to people is in the turn's language
(`TurnRuntime.lang`): the system prompt and tool descriptions the model gets, tool events' `title`,
the card's `prompt` (the catalog's template; object names only from ss-tools results or the matching
UIContext object, quoted and cut: agent/graph/names.py) and its alternatives (the catalog's words
for the actions the sidecar allowed).
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from agentchat.agent.graph.nodes import Nodes
from agentchat.agent.graph.state import AgentState, GraphDeps, TurnRuntime, last_ai


def start(state: AgentState, runtime: Runtime[TurnRuntime]) -> str:
    return "prefetch" if runtime.context.prefetch else "model"


def after_model(state: AgentState) -> str:
    ai = last_ai(state)
    return "policy" if ai is not None and ai.tool_calls else END


def build_graph(deps: GraphDeps) -> StateGraph[AgentState, TurnRuntime, AgentState, AgentState]:
    nodes = Nodes(deps)
    g = StateGraph(AgentState, context_schema=TurnRuntime)
    g.add_node("prefetch", nodes.prefetch)
    g.add_node("model", nodes.model)
    g.add_node("policy", nodes.policy)
    g.add_node("confirm", nodes.confirm)
    g.add_node("tools", nodes.tools)
    g.add_node("answer", nodes.answer)
    g.add_conditional_edges(START, start, ["prefetch", "model"])
    g.add_edge("prefetch", "policy")
    g.add_conditional_edges("model", after_model, ["policy", END])
    g.add_edge("policy", "confirm")
    g.add_edge("answer", END)
    return g
