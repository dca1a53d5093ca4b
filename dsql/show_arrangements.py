"""SHOW ARRANGEMENTS: every trace the session keeps, who owns it, and who reads it.

One row per arrangement: the arrangement of each table and materialized view, of each
index with a trace of its own (a default index on a table or materialized view is the
relation's arrangement, so it adds no row), of a dropped index that a view still reads,
and each arrangement inside a kept dataflow (`kind` "internal", named
`<owner>/<operator>`). `keys` names the key columns; `readers` counts the dataflows
that import the trace, which is how sharing shows: a view that reads an index adds a
reader to the index, not an arrangement of its own.

>>> from dsql.session import Session
>>> from dsql.execute import Executor
>>> ex = Executor(Session(kernel="local"))
>>> _ = ex.run("CREATE TABLE t (k int); CREATE MATERIALIZED VIEW v AS SELECT DISTINCT k FROM t")
>>> rows = ex.run("SHOW ARRANGEMENTS")[-1].table.to_pylist()
>>> [(r["name"], r["kind"], r["readers"]) for r in rows]
[('t', 'table', 1), ('v', 'materialized view', 0), ('v/Arrange(keys=_c0)', 'internal', 0)]
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from dsql.explain import placement
from dsql.runtime.arrangement import ImportNode, TracedNode

if TYPE_CHECKING:
    from dsql.session import Session


def arrangement_rows(session: Session) -> dict[str, list[Any]]:
    """The columns of SHOW ARRANGEMENTS (module docstring)."""
    readers = Counter(
        id(n.handle.source)
        for n in session.worker.nodes
        if isinstance(n, ImportNode) and not n.dropped
    )
    out: dict[str, list[Any]] = {
        k: [] for k in ("name", "kind", "kernel", "rows", "bytes", "batches", "keys", "readers")
    }

    def add(name: str, kind: str, node: Any, names: list[str] | None = None) -> None:
        trace = node.trace
        out["name"].append(name)
        out["kind"].append(kind)
        out["kernel"].append(placement(session.worker.kernel, trace))
        out["rows"].append(trace.rows)
        out["bytes"].append(trace.nbytes())
        out["batches"].append(len(trace.batches))
        out["keys"].append(", ".join(_column(k, names) for k in node.keys))
        out["readers"].append(readers[id(node)])

    owners: list[tuple[str, Any, list[Any]]] = []
    names: list[str] | None
    for rel in sorted(session.relations.values(), key=lambda r: r.name):
        if rel.arrangement is not None:
            names = [c.name for c in rel.columns]
            add(rel.name, rel.kind, rel.arrangement.node, names)
            owners.append((rel.name, rel.arrangement.node, [*rel.computation, *rel.nodes]))
    for index in sorted(session.indexes.by_name.values(), key=lambda i: i.name):
        if index.nodes:
            names = [c.name for c in session.relations[index.on].columns]
            add(index.name, "index", index.arrangement.node, names)
            owners.append((index.name, index.arrangement.node, list(index.nodes)))
    for index in session.indexes.dropped():
        on = session.relations.get(index.on)
        names = None if on is None else [c.name for c in on.columns]
        add(index.name, "dropped index", index.arrangement.node, names)
    for owner, own, nodes in owners:
        for node in nodes:
            if isinstance(node, TracedNode) and node is not own and not node.dropped:
                add(f"{owner}/{node.describe()}", "internal", node)
    return out


def _column(key: str, names: list[str] | None) -> str:
    """A key column by its name in the catalog when it is a relation's `_c{i}`."""
    position = int(key[2:]) if key.startswith("_c") and key[2:].isdigit() else None
    return key if names is None or position is None else names[position]


__all__ = ["arrangement_rows"]
