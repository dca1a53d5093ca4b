"""The kernel interface: the narrow relational engine every runtime operator is written against.

A kernel evaluates relational steps over *frames*: engine-specific handles to a
relation (a Spark DataFrame, an Arrow table for the in-process kernel). The
runtime never looks inside a frame; it hands the kernel sqlglot ASTs and frames,
and gets frames back. The steps themselves (projection, filter, explode, join on
keys, group and aggregate, union, consolidate, running aggregates) are built once,
as sqlglot queries, in `dsql.runtime.relational`, so that every kernel evaluates
the same query and results never depend on which kernel ran a step.

What a kernel must provide:

- `from_arrow` / `to_arrow`: data in and out of the driver;
- `query(select, inputs)`: evaluate a sqlglot query whose tables are the names
  of `inputs` (lazily where the engine allows);
- `materialize` / `release`: evaluate a frame now and cut its lineage, so later
  steps read stored rows; release the storage when no reader remains;
- `nbytes`, `schema`: sizes and column types (`materialize` gives exact row counts);
- `fanout(branches)`: the engine's spelling of "one input row becomes these rows"
  (Spark: `inline(array(struct...))`; DuckDB: `unnest([{...}], recursive := true)`).

Invariant: a kernel never changes the multiset a query denotes; `materialize`
returns a frame with the same rows as its argument.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp

Frame = Any
"""An engine-specific relation handle (Spark DataFrame, Arrow table, ...)."""


@dataclass(frozen=True, slots=True)
class Stored:
    """A materialized frame: no lineage behind it, its exact row count, and, when it is
    small enough to hold in the driver, its rows as an Arrow table."""

    frame: Frame
    rows: int
    table: pa.Table | None = None


class Kernel(ABC):
    """A relational engine that evaluates the runtime's steps (see module docstring)."""

    #: sqlglot dialect in which this kernel reads SQL.
    dialect: str = ""
    #: A short name for EXPLAIN and SHOW ARRANGEMENTS ("spark", "local").
    name: str = ""

    @abstractmethod
    def from_arrow(self, table: pa.Table) -> Frame:
        """A frame holding the rows of an Arrow table."""

    @abstractmethod
    def to_arrow(self, frame: Frame) -> pa.Table:
        """The rows of a frame as an Arrow table (an action: it evaluates the frame)."""

    @abstractmethod
    def query(self, select: exp.Query, inputs: Mapping[str, Frame]) -> Frame:
        """Evaluate `select`, whose table names are the keys of `inputs`."""

    #: Results with at most this many rows are held in the driver as Arrow tables.
    small_rows: int = 50_000

    @abstractmethod
    def materialize(
        self, frame: Frame, keys: Sequence[str] = (), estimate: int | None = None
    ) -> Stored:
        """Evaluate `frame` now and store its rows; the result has no lineage.

        `keys` are the columns readers will look rows up by (stored sorted by them
        where the engine can use that); `estimate` is a hint at the row count.
        """

    @abstractmethod
    def release(self, frame: Frame) -> None:
        """Free storage held by a frame returned from `materialize`."""

    @abstractmethod
    def nbytes(self, frame: Frame) -> int:
        """An estimate of the bytes a materialized frame holds."""

    @abstractmethod
    def schema(self, frame: Frame) -> pa.Schema:
        """The column names and types of a frame, as an Arrow schema (no action)."""

    @abstractmethod
    def fanout(self, branches: Sequence[Sequence[tuple[str, exp.Expression]]]) -> exp.Expression:
        """A select-list expression turning each input row into one row per branch.

        Every branch names the same output columns, in the same order.
        """

    @abstractmethod
    def map_arrow(
        self, frame: Frame, function: Callable[[pa.Table], pa.Table], schema: pa.Schema
    ) -> Frame:
        """Apply a Python function to the frame's rows, one Arrow batch at a time.

        `function` gets the batch (every column) and returns a table of `schema`.
        The slow path: Spark runs it in Python workers (tens of ms per action).
        """

    def union(self, frames: Sequence[Frame]) -> Frame:
        """The multiset sum of frames with the same columns (by name)."""
        from dsql.runtime import relational

        names = {f"__u{i}": frame for i, frame in enumerate(frames)}
        columns = self.schema(frames[0]).names
        return self.query(relational.union_all(list(names), columns), names)

    def append_time(self, frame: Frame, name: str, value: int) -> Frame:
        """The frame with one more time column `name` (placed before `__diff__`) set to `value`.

        How a collection enters a loop: its times gain a round coordinate. Lazy where
        the engine allows, and without copying the other columns where it can.
        """
        names = [n for n in self.schema(frame).names if n != "__diff__"]
        columns = ", ".join(f"`{n}`" for n in names)
        query = sqlglot.parse_one(
            f"SELECT {columns}, {int(value)} AS `{name}`, `__diff__` FROM f", read="spark"
        )
        assert isinstance(query, exp.Query)
        return self.query(query, {"f": frame})

    def sql(self, select: exp.Expression) -> str:
        """The text of `select` in this kernel's dialect."""
        return select.sql(dialect=self.dialect)
