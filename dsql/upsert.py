"""Upserts by key: records that replace their key's row (Materialize's ENVELOPE UPSERT).

A source declared `KEY (k, ...) ENVELOPE UPSERT` holds at most one row per key at every
time. Each record names its key's new row: where the key has a row, that row is
retracted and the record's inserted, both at the record's time; where it has none, the
record is inserted. A record whose value columns (every column outside the key) are all
NULL is a tombstone, as a Kafka record with a null value is in Materialize: it deletes
its key's row (a tombstone for a key with no row changes nothing). A row whose value
columns are all NULL therefore cannot be stored; a key with no value column at all
would make every record a tombstone and is refused (`check_key`). Within one batch of
records (one poll) the last record of a key wins: only it reaches the relation.

The upsert state is the relation itself. `Upserts.rows` is a cache of its rows by key,
read from the relation the first time a batch needs it (after a restart, the relation
recovered from the log), so recovery needs no second store.

>>> u = Upserts(key=(0,), arity=2)
>>> u.rows = {}
>>> out, into = u.changes([(1, "a"), (2, "b"), (1, "c")])
>>> out, into
([], [(1, 'c'), (2, 'b')])
>>> u.changes([(1, None), (2, "d")])
([(1, 'c'), (2, 'b')], [(2, 'd')])
>>> u.rows
{(2,): (2, 'd')}
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dsql.errors import SchemaError

Row = tuple[Any, ...]


def check_key(key: Sequence[str], columns: Sequence[str], relation: str) -> tuple[int, ...]:
    """The positions of the `key` columns in `columns`; a SchemaError if one is not a
    column, is named twice, or the key leaves no value column (module docstring)."""
    missing = [k for k in key if k not in columns]
    if missing:
        raise SchemaError(f"key column '{missing[0]}' is not a column of '{relation}'")
    if len(set(key)) != len(key):
        raise SchemaError(f"KEY of '{relation}' names a column twice")
    if len(key) == len(columns):
        raise SchemaError(
            f"KEY of '{relation}' covers every column: no record could be told from a delete",
            hint="ENVELOPE UPSERT needs a value column outside the key (NULL in all of "
            "them is a delete)",
        )
    return tuple(columns.index(k) for k in key)


def null_keys(table: pa.Table, key: Iterable[int]) -> list[int]:
    """The positions of the rows of `table` with a NULL in a key column, in order."""
    found: set[int] = set()
    for i in key:
        column = table.column(i)
        if column.null_count:
            mask = column.is_null().combine_chunks().to_pylist()
            found.update(j for j, null in enumerate(mask) if null)
    return sorted(found)


def rows_of(table: pa.Table) -> list[Row]:
    """The rows of `table` as tuples, in order."""
    columns = [c.to_pylist() for c in table.columns]
    return list(zip(*columns, strict=True)) if columns else []


def table_of(rows: Sequence[Row], schema: pa.Schema) -> pa.Table:
    """`rows` (tuples in the order of `schema`'s fields) as an Arrow table of `schema`."""
    return pa.table(
        [pa.array([r[i] for r in rows], f.type) for i, f in enumerate(schema)], schema=schema
    )


@dataclass
class Upserts:
    """A relation kept unique by key: its rows by key, and each batch of records turned
    into the retractions and insertions that apply it (module docstring)."""

    #: The positions of the key columns.
    key: tuple[int, ...]
    #: The number of columns.
    arity: int
    #: The relation's rows by key; None until read from the relation (`load`).
    rows: dict[Row, Row] | None = None

    def load(self, rows: Iterable[Row]) -> None:
        """Take the relation's current rows as the state (its key is unique)."""
        self.rows = {self.key_of(r): r for r in rows}

    def key_of(self, row: Row) -> Row:
        return tuple(row[i] for i in self.key)

    def is_tombstone(self, row: Row) -> bool:
        """Whether every value column (outside the key) of `row` is NULL."""
        return all(row[i] is None for i in range(self.arity) if i not in self.key)

    def stored(self, records: pa.Table) -> pa.Array:
        """Per record of `records` (columns in the relation's order), whether it is a
        row to store rather than a tombstone."""
        tombstone: Any = pa.array([True] * records.num_rows, pa.bool_())
        for i in range(self.arity):
            if i not in self.key:
                tombstone = pc.and_(tombstone, records.column(i).is_null())
        return pc.invert(tombstone.combine_chunks())

    def changes(self, records: Iterable[Row]) -> tuple[list[Row], list[Row]]:
        """The rows to retract and the rows to insert (both at one time) that apply
        `records` in order: per key the last record wins. The state moves with them."""
        assert self.rows is not None, "load the relation's rows first"
        last: dict[Row, Row | None] = {}
        for record in records:
            last[self.key_of(record)] = None if self.is_tombstone(record) else record
        retract: list[Row] = []
        insert: list[Row] = []
        for k, new in last.items():
            old = self.rows.get(k)
            if old == new:
                continue
            if old is not None:
                retract.append(old)
                del self.rows[k]
            if new is not None:
                insert.append(new)
                self.rows[k] = new
        return retract, insert


__all__ = ["Upserts", "check_key", "null_keys", "rows_of", "table_of"]
