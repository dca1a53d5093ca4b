"""Input sessions: the bridge from imperative code to a collection that changes over time.

An `InputSession` buffers updates `(row, time, diff)` and a time (`advance_to`)
below which it promises no further updates. `flush` exposes both to the worker
as one batch: many timestamps may share one flush ("temporal concurrency"), and
each update keeps its own time.

>>> from dsql.runtime.kernel.local import LocalKernel
>>> from dsql.runtime.dataflow import Worker
>>> worker = Worker(LocalKernel())
>>> edges = worker.new_input({"src": "int", "dst": "int"})
>>> edges.insert((1, 2)); edges.advance_to(1); edges.flush()
>>> edges.time
1
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from dsql.errors import SchemaError, TimeError
from dsql.runtime.dataflow import Batch, Node, Round, batch_schema
from dsql.runtime.lattice import DIFF, TIME

if TYPE_CHECKING:
    from dsql.runtime.collection import Collection
    from dsql.runtime.dataflow import Worker


class InputSession:
    """A source of updates for one collection (see module docstring)."""

    def __init__(self, worker: Worker, schema: pa.Schema) -> None:
        self.worker = worker
        self.schema = schema
        self.node = InputNode(self)
        self.closed = False
        self._time = 0
        self._frontier = 0
        self._rows: list[tuple[Any, ...]] = []
        self._times: list[int] = []
        self._diffs: list[int] = []
        self._tables: list[pa.Table] = []
        self._frames: list[tuple[Any, int | None]] = []
        self._flushed: list[Batch] = []

    @property
    def time(self) -> int:
        """The current time: updates are accepted at this time or later."""
        return self._time

    @property
    def frontier(self) -> int:
        """The time the worker has been told of (the last flushed `advance_to`)."""
        return self._frontier

    def to_collection(self) -> Collection:
        """The collection whose updates this session supplies."""
        from dsql.runtime.collection import Collection

        return Collection(self.node)

    # --- changes -------------------------------------------------------------------
    def insert(self, row: Sequence[Any]) -> None:
        """Add one copy of `row` at the current time."""
        self.update_at(row, self._time, 1)

    def remove(self, row: Sequence[Any]) -> None:
        """Remove one copy of `row` at the current time."""
        self.update_at(row, self._time, -1)

    def update(self, row: Sequence[Any], diff: int) -> None:
        """Change the count of `row` by `diff` at the current time."""
        self.update_at(row, self._time, diff)

    def update_at(self, row: Sequence[Any], time: int, diff: int) -> None:
        """Change the count of `row` by `diff` at `time`, which must not be before `self.time`."""
        self._check_open()
        if time < self._time:
            raise TimeError(
                f"update at time {time} is before the input's time {self._time}",
                hint="updates can only be made at or after the time given to advance_to",
            )
        row = tuple(row)
        if len(row) != len(self.schema):
            raise SchemaError(
                f"row {row!r} has {len(row)} values; the input has {len(self.schema)} columns "
                f"({', '.join(self.schema.names)})"
            )
        self._rows.append(row)
        self._times.append(int(time))
        self._diffs.append(int(diff))

    def insert_many(self, rows: Iterable[Sequence[Any]], diff: int = 1) -> None:
        """Add every row (with `diff` copies each) at the current time."""
        for row in rows:
            self.update_at(row, self._time, diff)

    def load_arrow(self, table: pa.Table, time: int | None = None) -> None:
        """Add an Arrow table as one batch at `time` (default: the current time).

        The table has the input's data columns; it may also have `__time__` and
        `__diff__` columns, which then give each row its own time and diff.
        """
        self._check_open()
        at = self._time if time is None else time
        if at < self._time:
            raise TimeError(f"load at time {at} is before the input's time {self._time}")
        missing = [n for n in self.schema.names if n not in table.column_names]
        if missing:
            raise SchemaError(
                f"table lacks column(s) {', '.join(missing)}",
                hint=f"the input's columns are {', '.join(self.schema.names)}",
            )
        n = table.num_rows
        # Filled by numpy: a list of 10M Python ints took 0.8 s of the 10M book's load.
        times = table[TIME] if TIME in table.column_names else pa.array(np.full(n, at, np.int64))
        diffs = table[DIFF] if DIFF in table.column_names else pa.array(np.ones(n, np.int64))
        if TIME in table.column_names and n and pa.compute.min(times).as_py() < self._time:
            raise TimeError(f"the table has updates before the input's time {self._time}")
        try:
            data = table.select(self.schema.names).cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
            raise SchemaError(f"table does not match the input's schema: {error}") from error
        columns = [*data.columns, times.cast(pa.int64()), diffs.cast(pa.int64())]
        self._tables.append(pa.Table.from_arrays(columns, schema=batch_schema(self.schema, 1)))

    def load_frame(self, frame: Any, rows: int | None = None) -> None:
        """Add a kernel frame (e.g. a Spark DataFrame with the batch columns) as one batch;
        `rows`: its row count when known, which spares the arrangement a look at the
        frame's head to size it."""
        self._check_open()
        self._frames.append((frame, rows))

    def advance_to(self, time: int) -> None:
        """Promise that no further updates will come at times before `time`."""
        self._check_open()
        if time < self._time:
            raise TimeError(
                f"cannot advance to {time}: the input is already at {self._time}",
                hint="time only moves forward",
            )
        self._time = int(time)

    def flush(self) -> None:
        """Expose buffered updates and the current time to the worker."""
        self._check_open()
        self._stage()
        self._frontier = self._time

    def close(self) -> None:
        """Flush and promise no further updates at any time."""
        self._stage()
        self.closed = True

    def _check_open(self) -> None:
        if self.closed:
            raise TimeError("the input is closed", hint="create a new input to add more data")

    def _stage(self) -> None:
        kernel = self.worker.kernel
        if self._rows:
            columns = list(zip(*self._rows, strict=True))
            try:
                arrays = [
                    pa.array(list(values), type=f.type)
                    for values, f in zip(columns, self.schema, strict=True)
                ]
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as error:
                refused = len(self._rows)
                self._clear_rows()
                raise SchemaError(
                    f"rows do not match the input's column types: {error}; none of the "
                    f"{refused} updates buffered since the last flush was applied",
                    hint=", ".join(f"{f.name} {f.type}" for f in self.schema),
                ) from error
            arrays += [pa.array(self._times, pa.int64()), pa.array(self._diffs, pa.int64())]
            self._tables.append(pa.Table.from_arrays(arrays, schema=batch_schema(self.schema, 1)))
            self._clear_rows()
        if self._tables:
            table = pa.concat_tables(self._tables) if len(self._tables) > 1 else self._tables[0]
            self._tables = []
            self._flushed.append(Batch(kernel.from_arrow(table), table.num_rows, table))
        for frame, rows in self._frames:
            self._flushed.append(Batch(frame, rows))
        self._frames = []

    def _clear_rows(self) -> None:
        self._rows, self._times, self._diffs = [], [], []

    def has_flushed(self) -> bool:
        return bool(self._flushed)

    def take_flushed(self) -> Batch | None:
        """The flushed updates as one batch, handed to the worker once."""
        batches, self._flushed = self._flushed, []
        if not batches:
            return None
        if len(batches) == 1:
            return batches[0]
        rows = [b.rows for b in batches]
        total = None if None in rows else sum(r for r in rows if r is not None)
        return Batch(self.worker.kernel.union([b.frame for b in batches]), total)


class InputNode(Node):
    """The operator through which an input session's batches enter the graph."""

    def __init__(self, session: InputSession) -> None:
        self.session = session
        #: The batch the latest step took, handed back if its round is undone.
        self._taken: Batch | None = None
        super().__init__(session.worker, (), session.schema, 1)

    def step(self, rnd: Round) -> Batch | None:
        self._taken = self.session.take_flushed()
        return self._taken

    def rewind(self) -> None:
        if self._taken is not None:
            self.session._flushed.insert(0, self._taken)
            self._taken = None

    def describe(self) -> str:
        return f"Input({', '.join(self.columns)})"
