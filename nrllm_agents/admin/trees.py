"""The tree of a run on its admin page: its parent and root, its sub-agents' runs (each one's
status and spend, a link), and on the root what the whole tree spent."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin
from django.utils.html import format_html, format_html_join

from ..models import AgentRun
from ..presentation import trees


class TreeFields:
    """Read-only fields of ``AgentRunAdmin``'s "Tree" section (its ``_url`` builds the links)."""

    TREE_FIELDS = ("tree_parent_link", "tree_root_link", "tree_depth", "tree_children_links", "tree_spend")

    _url: Callable[..., str]  # RunCancelAdmin's (only annotated here: it must not shadow it)

    @admin.display(description="called by")
    def tree_parent_link(self, run: AgentRun) -> str:
        if not run.tree_parent_id:
            return "-"
        where = f" (step #{run.tree_call_sequence})" if run.tree_call_sequence is not None else ""
        return format_html('<a href="{}">{}</a>{}', self._url("change", run.tree_parent_id), run.tree_parent_id, where)

    @admin.display(description="root of the tree")
    def tree_root_link(self, run: AgentRun) -> str:
        if not run.tree_root_id:
            return "this run"
        return format_html('<a href="{}">{}</a>', self._url("change", run.tree_root_id), run.tree_root_id)

    @admin.display(description="sub-agent runs")
    def tree_children_links(self, run: AgentRun) -> str:
        children = trees.tree_dict(run)["children"]
        return (
            format_html_join(
                ", ",
                '<a href="{}">{}</a> ({}, {}, {} tokens, cost {})',
                (
                    (
                        self._url("change", c["run_id"]),
                        c["run_id"],
                        c["agent"],
                        c["status"],
                        c["tokens"],
                        c["cost"] or "-",
                    )
                    for c in children
                ),
            )
            or "-"
        )

    @admin.display(description="spend of the tree below and including this run")
    def tree_spend(self, run: AgentRun) -> str:
        summary = trees.tree_dict(run)
        spend = summary["spend"]
        estimated = " (estimated)" if spend["cost_estimated"] else ""
        return f"{summary['runs']} runs, {spend['total_tokens']} tokens, cost {spend['cost'] or '-'}{estimated}"
