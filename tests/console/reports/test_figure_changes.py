"""A figure's change against an earlier run, including one that dropped to zero."""

from __future__ import annotations

from console.reports.comparisons import figure_changes


def test_a_state_that_dropped_to_none_shows_its_change() -> None:
    before = {"messages": 10, "states": {"COMMITTED": 5, "ROLLED_BACK": 3}}
    now = {"messages": 12, "states": {"COMMITTED": 9, "UNKNOWN": 1}}
    assert figure_changes(now, before) == {
        "messages": 2,
        "states.COMMITTED": 4,
        "states.ROLLED_BACK": -3,  # gone from the summary: now none
        "states.UNKNOWN": 1,  # new: none before
    }


def test_top_level_figures_only_when_both_have_them() -> None:
    assert figure_changes({"lag": 5, "max_lag_ms": 7}, {"lag": 2}) == {"lag": 3}
