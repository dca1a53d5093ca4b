"""Top-k as a reduce logic: per group, the rows ranked within `(offset, offset + limit]`.

A group's accumulated rows carry multiplicities, so ranks are counted in copies:
with `before` the copies ranked ahead of a row and `m` its own, the row keeps
`max(0, min(before + m, hi) - max(before, lo))` copies, where `lo = offset` and
`hi = offset + limit`. Rows equal on the ORDER BY keys are ranked by all their
columns, so the choice among ties is the same at every time and on every kernel.
Window sums run per `(key, time)` group, the candidate times of the reduce.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import parse_one

from dsql.runtime.lattice import DIFF, time_columns
from dsql.runtime.operators.reduce_logic import _ACC, ReduceLogic


def _q(name: str) -> str:
    return f'"{name}"'


@dataclass(frozen=True)
class OrderKey:
    """One ranking key: a column, its direction, and where NULLs go."""

    column: str
    desc: bool = False
    nulls_first: bool = False

    def sql(self) -> str:
        direction = "DESC" if self.desc else "ASC"
        nulls = "FIRST" if self.nulls_first else "LAST"
        return f"{_q(self.column)} {direction} NULLS {nulls}"


@dataclass(frozen=True)
class TopK(ReduceLogic):
    """Per group, the rows ranked `offset < rank <= offset + limit` by `order` (see module).

    >>> TopK((OrderKey("x", desc=True),), limit=3).describe()
    'TopK(order=x DESC NULLS LAST, limit=3, offset=0)'
    """

    order: tuple[OrderKey, ...]
    limit: int | None = None
    offset: int = 0

    def query(self, keys, values, depth, dialect):  # type: ignore[override]
        group = [_q(c) for c in (*keys, *time_columns(depth))]
        ties = [OrderKey(v).sql() for v in values]
        rank = ", ".join([k.sql() for k in self.order] + ties) or "1"
        before = (
            f"COALESCE(SUM({_q(DIFF)}) OVER (PARTITION BY {', '.join(group)} ORDER BY {rank} "
            "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)"
        )
        upto = f"__before + {_q(DIFF)}"
        if self.limit is not None:
            upto = f"LEAST({upto}, {self.offset + self.limit})"
        kept = f"CAST(GREATEST(0, {upto} - GREATEST(__before, {self.offset})) AS BIGINT)"
        columns = ", ".join(_q(c) for c in (*keys, *values, *time_columns(depth)))
        sql = (
            f"SELECT {columns}, {kept} AS {_q(DIFF)} FROM "
            f"(SELECT *, CAST({before} AS BIGINT) AS __before FROM {_ACC}) AS ranked "
            f"WHERE {kept} > 0"
        )
        return parse_one(sql)

    def describe(self) -> str:
        order = ", ".join(k.sql().replace('"', "") for k in self.order)
        return f"TopK(order={order}, limit={self.limit}, offset={self.offset})"
