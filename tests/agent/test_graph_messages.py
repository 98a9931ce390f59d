"""The thread's message reducer (agent/graph/state.py `merge_messages`): a retry after a
replica died mid-step removes messages the saved checkpoint may not have; that must neither
fail nor lose the removals that do apply."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage

from agentchat.agent.graph.state import merge_messages

ids = st.lists(st.sampled_from([f"m{i}" for i in range(8)]), unique=True, max_size=8)


@given(have=ids, remove=ids)
def test_removing_unknown_messages_is_a_no_op_and_known_ones_go(have: list[str],
                                                                remove: list[str]) -> None:
    left = [AIMessage(content=i, id=i) for i in have]
    out = merge_messages(left, [RemoveMessage(id=i) for i in remove])
    assert [m.id for m in out] == [i for i in have if i not in remove]


def test_a_retry_input_keeps_the_user_message() -> None:
    left = [HumanMessage(content="hi", id="u1"), AIMessage(content="a", id="a1")]
    right = [RemoveMessage(id="a1"), RemoveMessage(id="lc_run--lost"),
             HumanMessage(content="hi", id="u1")]
    assert [m.id for m in merge_messages(left, right)] == ["u1"]
