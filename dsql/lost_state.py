"""Lost state: relations whose state stored off the driver (Spark's batches) is gone.

A kernel that finds a stored batch missing or unreadable raises `StateLostError` with
the batch's URI; the kernel knows which dataflow node stored it (`Kernel.owner_of`), and
the session knows which table, view or index each node belongs to. `LostState` joins the
two:

- The statement that meets the loss fails with the error, named after the relation
  ("the stored state of table 't' is lost: ..."), and is undone as an interrupted one
  is: the round is rewound (`Worker._run_top`) and the statement's writes are taken
  back (`Executor._undo_writes`), so no write is acknowledged that did not happen.
- The relation is fenced: its dataflow leaves the graph, so later rounds (other
  tables' writes, other views) never meet the missing files again; every statement
  over it (reads, writes, SUBSCRIBE, views created over it) raises the same error,
  as do reads of the relations built on it. It is no data error: views are not put in
  error for it and it never heals. DROP of the relation (with CASCADE, its dependents)
  works, after which a relation of the name may be created again.

Invariant: no relation reads as fewer rows than it holds; a relation whose rows are
partly gone answers only with this error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsql.errors import StateLostError

if TYPE_CHECKING:
    from dsql.session import Session

#: How to get past lost state (the error's hint, after the kernel's).
_RECREATE = "DROP {kind} {name} (CASCADE for what is built on it) and create it again"


class LostState:
    """The relations of a session whose stored state is lost (see module docstring)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        #: Per relation whose state is lost, the error that found it.
        self.lost: dict[str, StateLostError] = {}

    def record(self, error: StateLostError) -> None:
        """Name the relation whose state `error` found lost in its message and hint, and
        fence it; nothing when no relation owns the state (a read's own, dropped with
        the statement) or it is recorded already."""
        if error.relation is not None:
            return
        s = self.session
        owner = error.owner if error.owner is not None else s.worker.kernel.owner_of(error.path)
        name = None if owner is None else self._owning(owner)
        if name is None:
            return
        kind = s.relations[name].kind
        error.relation = name
        error.message = f"the stored state of {kind} '{name}' is lost: {error.message}"
        error.args = (error.message,)
        recreate = _RECREATE.format(kind=kind.upper(), name=name)
        error.hint = f"{error.hint}; {recreate}" if error.hint else recreate
        self.lost[name] = error
        self._fence(name)

    def check(self, name: str) -> None:
        """Raise the error of relation `name` when its state is lost."""
        found = self.lost.get(name)
        if found is not None:
            error = StateLostError(
                found.message, path=found.path, owner=found.owner, hint=found.hint
            )
            error.relation = found.relation
            raise error

    def forget(self, name: str) -> None:
        """Relation `name` is dropped."""
        self.lost.pop(name, None)

    def _owning(self, node_id: int) -> str | None:
        """The relation whose dataflow (or an index on which) holds node `node_id`."""
        s = self.session
        for rel in s.relations.values():
            nodes = [*rel.nodes, *rel.computation]
            if rel.input is not None:
                nodes.append(rel.input.node)
            if rel.arrangement is not None:
                nodes.append(rel.arrangement.node)
            if any(n is not None and n.id == node_id for n in nodes):
                return rel.name
        for index in s.indexes.by_name.values():
            nodes = [*index.nodes, *index.computation]
            if any(n is not None and n.id == node_id for n in nodes):
                return index.on
        return None

    def _fence(self, name: str) -> None:
        """Take relation `name`'s dataflow, and its indexes', out of the graph: no round
        steps them again (relations reading it receive nothing more, and refuse to be
        read through `check`)."""
        s = self.session
        rel = s.relations[name]
        nodes = [*rel.computation, *rel.nodes]
        if rel.input is not None and rel.arrangement is not None:
            nodes += [rel.input.node, rel.arrangement.node]
        for index in s.indexes.on(name):
            nodes += [*index.computation, *index.nodes]
        s.worker.drop([n for n in nodes if n is not None])
