"""Hostile text costs linear time (issue 31, hole 1): the offline planner's matching and the
catalog's argument patterns, over adversarial texts up to the 16 KB text cap.

The old clause split backtracked about cubically on a run of whitespace (200 spaces 16 ms,
800 spaces 1 s, 16 KB hours); each call here gets a generous second on texts built from the
pieces such patterns choke on: whitespace runs, separators, mixed scripts, digits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentchat.agent.graph.offline import rules
from agentchat.agent.graph.prompt import TurnContext
from agentchat.catalog import load_catalog
from agentchat.errors import CatalogError
from agentchat.settings import PACKAGE_DATA
from agentchat.tool_request import InvalidArguments, validate_arguments

CAP = 16 * 1024
BOUND_S = 1.0
CATALOG = load_catalog(PACKAGE_DATA / "catalog.yaml")
PIECES = [" ", "  ", "\t", "\n", "\u00a0", " и ", ", и ", " а потом ", " then ", " and ", ";",
          ". ", ",", ".", "и", "and", "дашборд", "dashboard", "набор", "данных", "prod",
          "ss-dev", "прод", "42", "#7", "task-", "-", "a", "я", "ё", "Ж", "x" * 5, "это"]


@st.composite
def hostile_texts(draw: st.DrawFn) -> str:
    """A few pieces, each repeated up to thousands of times, cut to the cap."""
    parts = draw(st.lists(st.tuples(st.sampled_from(PIECES), st.integers(1, 4000)),
                          min_size=1, max_size=6))
    return "".join(p * n for p, n in parts)[:CAP]


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


CALLS: dict[str, Callable[[str], Any]] = {
    "clauses": rules.clauses,
    "envs_in": rules.envs_in,
    "numbers_in": rules.numbers_in,
    "search_words": rules.search_words,
    "refers_to_context": rules.refers_to_context,
    "intent_of": lambda t: rules.intent_of(t, set(CATALOG.names)),
    "plan_call": lambda t: rules.plan_call("search_dashboards", t, TurnContext(),
                                           CATALOG.get("search_dashboards").args),  # type: ignore[union-attr]
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=hostile_texts())
def test_the_planners_matching_is_linear(text: str) -> None:
    for name, call in CALLS.items():
        took = timed(lambda c=call: c(text))  # type: ignore[misc]
        assert took < BOUND_S, f"{name} took {took:.2f} s on {len(text)} characters"


@settings(max_examples=30, deadline=None)
@given(text=hostile_texts())
def test_a_catalog_pattern_on_hostile_arguments_is_linear(text: str) -> None:
    tool = CATALOG.get("get_task_status")
    assert tool is not None and "pattern" in str(tool.args)
    started = time.perf_counter()
    with pytest.raises(InvalidArguments):
        validate_arguments(tool, {"task_id": "task-" + text + "!"})
    assert time.perf_counter() - started < BOUND_S


def test_the_worst_cases_by_hand() -> None:
    """The split's own worst case, a whole cap of whitespace, and the controls. 1,500 spaces
    first: the old split took ~6 s there, so a regression fails here instead of running for
    hours on the cap (a regex in C does not see pytest-timeout's signal)."""
    for text in ("a" + " " * 1500 + "b", "a" + " " * (CAP - 2) + "b", "a" + ", " * (CAP // 2 - 1),
                 "и" + " и" * (CAP // 4)):
        assert timed(lambda t=text: rules.clauses(t)) < BOUND_S  # type: ignore[misc]
    assert rules.clauses("задеплой 42 в ss-dev и покажи здоровье prod") == [
        "задеплой 42 в ss-dev", "покажи здоровье prod"]
    assert rules.clauses("a; b. c, then d") == ["a", "b", "c", "d"]


def test_a_catalog_pattern_re2_cannot_run_is_refused(tmp_path: Any) -> None:
    """A back-reference (which only a backtracking engine runs) never reaches an argument."""
    text = (PACKAGE_DATA / "catalog.yaml").read_text()
    bad = text.replace('"^task-[A-Za-z0-9-]{1,58}$"', '"^(task-)\\\\1$"')
    assert bad != text
    path = tmp_path / "catalog.yaml"
    path.write_text(bad)
    with pytest.raises(CatalogError, match="get_task_status"):
        load_catalog(path)
