"""Rendering top-k (ORDER BY ... LIMIT inside views and subqueries): not yet compiled."""

from __future__ import annotations

from dsql.errors import UnsupportedError


def render_topk(renderer, plan):  # type: ignore[no-untyped-def]
    raise UnsupportedError(
        "ORDER BY ... LIMIT inside a view or subquery is not supported yet",
        hint="use LIMIT only in the outermost SELECT of a one-off query",
    )
