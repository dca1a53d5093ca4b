"""The in-process kernel: frames are Arrow tables, steps are DuckDB SQL over them.

For relations so small that a Spark job's fixed cost would dominate. Every query
runs at once (frames are always materialized Arrow tables), so `materialize` is
the identity and lineage never grows. A query holds at most the memory budget
(`runtime.memory`): DuckDB's `memory_limit` inside the engine, and its result is read
batch by batch, stopped once it outgrows the budget.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from dsql.errors import (
    NUMERIC_LIMIT,
    NUMERIC_OVERFLOW,
    DsqlError,
    ExecutionError,
    SchemaError,
    numeric_overflow,
)
from dsql.runtime import memory
from dsql.runtime.dataflow import canceled
from dsql.runtime.kernel import (
    chain_reduce,
    driver,
    duckdb_errors,
    duckdb_sandbox,
    float_text,
    interval_macros,
    numeric_transcendental,
)
from dsql.runtime.kernel import key_index as _index
from dsql.runtime.kernel.base import (
    Capability,
    Frame,
    Kernel,
    Pipeline,
    Placement,
    Prepared,
    Stored,
    engine_message,
)
from dsql.runtime.kernel.driver import JoinShape, Selection
from dsql.runtime.kernel.driver_reduce import ReduceRows
from dsql.runtime.lattice import DIFF, Antichain, time_columns


class LocalKernel(Kernel):
    """Evaluates runtime steps with DuckDB over Arrow tables in the driver."""

    dialect = "duckdb"
    name = "local"
    probe_by_keys = False
    #: Every step over frames in the driver (`kernel.driver`, `key_index`), and bounds
    #: read from the tables. Not `NULL_FREE`: DuckDB's hash join gains nothing from `=`
    #: over NULL-safe equality.
    capabilities = frozenset(
        {
            Capability.CONSOLIDATE_SMALL,
            Capability.JOIN_SMALL,
            Capability.PROJECT_SMALL,
            Capability.REDUCE_SMALL,
            Capability.SHIFT_TIME,
            Capability.RUN_MANY,
            Capability.ROWS_WITH_KEYS,
            Capability.KEY_UNION,
            Capability.KEY_INDEX,
            Capability.KEY_DIRECTORY,
            Capability.KEY_SUMS,
            Capability.KEY_MATCHES,
            Capability.CONCATENATE,
            Capability.BOUNDS,
        }
    )

    def __init__(self) -> None:
        self._open(memory.default_budget())
        self._deadline: float | None = None

    def set_deadline(self, deadline: float | None) -> None:
        self._deadline = deadline

    def _open(self, memory_limit: int) -> None:
        """A new sandboxed DuckDB under `memory_limit` bytes, and no cursor on it yet.

        One thread (a step's batch is small: bigger relations go to Spark under `auto`),
        no file, network or extension access, no spilling (state past the budget is an
        error, never a `.tmp` folder written for hours), and the configuration locked.
        """
        self._con = duckdb_sandbox.connect(memory_limit=memory_limit)
        # Spark's `raise_error(message)`, which plans use for runtime errors they predict.
        self._con.execute("CREATE MACRO raise_error(message) AS error(message)")
        interval_macros.install(self._con)
        numeric_transcendental.register_duckdb(self._con)
        float_text.register_duckdb(self._con)
        self.memory_limit = memory_limit
        # One cursor per thread, kept: a cursor per statement costs more than the small
        # statements it runs. Registered inputs are replaced by name at each run.
        self._local = threading.local()

    def set_memory_limit(self, limit: int) -> None:
        # The configuration is locked, and DuckDB's limit is the database's: a new
        # connection takes it (inputs are registered afresh at each run).
        self._open(int(limit))

    def from_arrow(self, table: pa.Table) -> pa.Table:
        return table

    def to_arrow(self, frame: pa.Table) -> pa.Table:
        return frame

    def prepare(self, select: exp.Query) -> Prepared:
        # Inputs are read under names of their own (`_placeholder`), which `run` replaces
        # with the name each frame is registered under; a CTE keeps its name.
        ctes = {cte.alias_or_name for cte in select.find_all(exp.CTE)}
        names = sorted({t.name for t in select.find_all(exp.Table)})
        inputs = {n for n in names if n and n not in ctes}
        if not inputs:
            return Prepared(self.sql(select), tuple((n, n) for n in names))
        # A placeholder that no text of the tree holds (a string literal, a quoted name)
        # occurs in the prepared text only where an input is read.
        own = [v for node in select.walk() for v in node.args.values() if isinstance(v, str)]
        salt = next(
            k
            for k in itertools.count()
            if not any(_placeholder(n, k) in text for n in inputs for text in own)
        )
        marks = {n: _placeholder(n, salt) for n in inputs}
        select = select.copy()
        for table in select.find_all(exp.Table):
            if table.name in inputs and not table.args.get("db"):
                if not table.alias:
                    table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
                table.set("this", exp.to_identifier(marks[table.name], quoted=True))
        text = self.sql(select)
        tables = tuple((n, marks[n] if n in inputs else n) for n in names)
        return Prepared(text, tables)

    def _cursor(self) -> tuple[Any, dict[Any, Any]]:
        """This thread's cursor and the tables registered on it, by name."""
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            cursor = self._local.cursor = (self._con.cursor(), {})
        return cursor

    def run(self, prepared: Prepared, inputs: Mapping[str, pa.Table]) -> pa.Table:
        timer = None
        if self._deadline is None:
            con, registered = self._cursor()
        else:  # DuckDB stops a query when interrupted: a cursor of its own, so an
            # interrupt arriving late cannot reach the next statement
            con, registered = self._con.cursor(), {}
            timer = threading.Timer(max(self._deadline - time.monotonic(), 0.0), con.interrupt)
            timer.start()
        text = prepared.text
        try:
            for name, bound in prepared.tables:
                frame = inputs.get(name)
                if bound != name:
                    text = text.replace(f'"{bound}"', _source(con, registered, name, frame))
                elif frame is None:  # a CTE's name, or a missing input: never a stale table
                    if registered.pop(name, None) is not None:
                        con.unregister(name)
                elif registered.get(name) is not frame:
                    con.register(name, frame)
                    registered[name] = frame
            result = _arrow_result(con, text, self.memory_limit)
        except DsqlError:
            raise
        except Exception as error:  # noqa: BLE001 - engine errors become DsqlErrors
            if self._deadline is not None and time.monotonic() >= self._deadline:
                raise canceled() from None
            # DuckDB's advice (TRY(...), its settings) is no SQL a dsql user can write.
            message = str(error).strip().splitlines()[0].split(" Use TRY(")[0]
            if "Out of Memory" in message:
                raise memory.exceeded(self.memory_limit, "DuckDB could not allocate") from None
            overflow = _OVERFLOW.search(message)
            if overflow is not None:
                raise ExecutionError(
                    f"{_OUT_OF_RANGE[overflow.group(1)]} out of range",
                    hint="cast to numeric for larger values",
                ) from None
            if "division by zero" in message.lower():  # planned (RAISE_ERROR) or DuckDB's
                raise ExecutionError("division by zero") from None
            numeric = _numeric_overflow(message)
            if numeric is not None:
                raise numeric from None
            if "Referenced column" in message or "not found in FROM clause" in message:
                raise SchemaError(f"unknown column: {engine_message(message, None)[0]}") from error
            # The statement is dsql's, over internal names: the user's is shown instead.
            said, raised = engine_message(message, prepared.text)
            if raised:
                raise ExecutionError(said) from error
            raise duckdb_errors.translated(said) or ExecutionError(
                f"DuckDB failed: {said}"
            ) from error
        finally:
            if timer is not None:
                timer.cancel()
                con.close()
        return result

    def owns(self, frame: Frame) -> bool:
        return isinstance(frame, pa.Table)

    def placement(self, frame: Frame | None = None) -> Placement:
        return Placement.LOCAL

    def rows(self, frame: pa.Table) -> int:
        return frame.num_rows

    def consolidate_small(
        self,
        frames: Sequence[pa.Table],
        columns: Sequence[str],
        depth: int,
        frontier: Antichain | None = None,
        signs: Sequence[int] | None = None,
    ) -> pa.Table | None:
        return driver.consolidate(frames, columns, depth, frontier, signs)

    def prepare_many(self, branches: Sequence[Any], depth: int) -> Any:
        # Each branch's rows as one struct column, NULL where its condition fails: one
        # statement for all, the rows split apart in Arrow (`run_many`).
        columns: list[exp.Expr] = [exp.column(c, quoted=True) for c in (*time_columns(depth), DIFF)]
        for i, branch in enumerate(branches):
            struct: exp.Expression = exp.Struct(
                expressions=[
                    exp.PropertyEQ(this=exp.to_identifier(name, quoted=True), expression=e.copy())
                    for name, e in branch.columns
                ]
            )
            if branch.where is not None:
                struct = exp.Case(ifs=[exp.If(this=branch.where.copy(), true=struct)])
            columns.append(exp.alias_(struct, f"__s{i}", quoted=True))
        query = exp.select(*columns).from_("src")
        return self.prepare(query), depth

    def run_many(self, prepared: Any, frame: pa.Table) -> list[pa.Table]:
        query, depth = prepared
        result = self.run(query, {"src": frame})
        extra = [*time_columns(depth), DIFF]
        tail = result.select(extra)
        out = []
        for column in result.columns[len(extra) :]:
            fields = [column.type.field(j) for j in range(column.type.num_fields)]
            schema = pa.schema([*fields, *tail.schema])
            if column.null_count == len(column):
                out.append(schema.empty_table())
                continue
            rows, kept = column, tail
            if column.null_count:
                valid = pc.is_valid(column)
                rows, kept = column.filter(valid), tail.filter(valid)
            data = (
                rows.combine_chunks().flatten() if rows.num_chunks != 1 else rows.chunk(0).flatten()
            )
            out.append(pa.Table.from_arrays([*data, *kept.columns], schema=schema))
        return out

    def join_small(self, left: pa.Table, right: pa.Table, shape: JoinShape) -> pa.Table | None:
        return driver.join(left, right, shape)

    def rows_with_keys(
        self, frame: pa.Table, keys: Sequence[str], probe: pa.Table, by: Sequence[str] | None = None
    ) -> pa.Table | None:
        return driver.rows_with_keys(frame, keys, probe, by)

    def key_union(self, frames: Sequence[pa.Table], keys: Sequence[str]) -> pa.Table | None:
        first = frames[0].select(list(keys))
        try:
            rest = [f.select(list(keys)).cast(first.schema) for f in frames[1:]]
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return None
        return pa.concat_tables([first, *rest])

    def shift_time(
        self, frame: pa.Table, name: str, by: int, at_most: int | None
    ) -> pa.Table | None:
        at = frame.schema.get_field_index(name)
        shifted = pc.add_checked(frame[name], pa.scalar(by, pa.int64()))
        frame = frame.set_column(at, name, shifted)
        return frame if at_most is None else frame.filter(pc.less_equal(frame[name], at_most))

    def reduce_small(
        self, rows: ReduceRows, logic: Callable[[pa.Table], pa.Table]
    ) -> tuple[pa.Table, pa.Table] | None:
        def held(acc: pa.Table) -> pa.Table | None:  # the logic's rows, where they are ours
            desired = logic(acc)
            return desired if self.owns(desired) else None

        return chain_reduce.small_step(rows, held)

    def key_index(
        self, frame: pa.Table, keys: Sequence[str], parts: Sequence[_index.KeyIndex] = ()
    ) -> _index.KeyIndex | None:
        if not _index.worth_indexing(frame.num_rows, keys):
            return None
        merged = _index.KeyIndex.merged(frame, parts) if parts else None
        return merged if merged is not None else _index.KeyIndex.build(frame, keys)

    def key_directory(
        self, frames: Sequence[pa.Table], keys: Sequence[str]
    ) -> _index.KeyDirectory | None:
        return _index.KeyDirectory.build(frames, keys)

    def key_sums(
        self,
        frame: pa.Table,
        keys: Sequence[str],
        index: _index.KeyIndex | None,
        probe: pa.Table,
        by: Sequence[str],
    ) -> np.ndarray | None:
        if not frame.num_rows:
            return np.zeros(probe.num_rows, np.int64)
        index = index or _index.KeyIndex.build(frame, keys)
        return None if index is None else index.sums(probe, by)

    def key_matches(
        self,
        frame: pa.Table,
        keys: Sequence[str],
        index: _index.KeyIndex | None,
        probe: pa.Table,
        by: Sequence[str],
        names: Sequence[str],
    ) -> tuple[np.ndarray, list[np.ndarray]] | None:
        index = index or _index.KeyIndex.build(frame, keys)  # too small to keep one
        found = None if index is None else index.matches(probe, by)
        if index is None or found is None:
            return None
        positions, probe_rows = found
        columns = [index.ints(name) for name in names]
        if any(c is None for c in columns):
            return None
        return probe_rows, [c[positions] for c in columns if c is not None]

    def project_small(self, frame: pa.Table, selection: Selection) -> pa.Table | None:
        return driver.project(frame, selection)

    def bounds(self, frame: pa.Table, column: str) -> tuple[Any, Any] | None:
        return driver.bounds(frame, column)

    def prepare_pipeline(self, pipeline: Pipeline) -> Any:
        # One statement: a round trip costs more than the small work of each stage.
        final = pipeline.final.copy()
        for stage in pipeline.stages:
            final = final.with_(stage.name, as_=stage.query.copy(), append=True, copy=False)
        return self.prepare(final)

    def run_pipeline(
        self, prepared: Any, inputs: Mapping[str, pa.Table], keys: Sequence[str] = ()
    ) -> tuple[pa.Table, list[pa.Table]]:
        return self.run(prepared, inputs), []

    def materialize(
        self, frame: pa.Table, keys: Sequence[str] = (), estimate: int | None = None
    ) -> Stored:
        table = frame
        if frame.num_columns and any(c.num_chunks != 1 for c in frame.columns):
            table = frame.combine_chunks()
        return Stored(table, table.num_rows, table)

    def concatenate(
        self, frames: Sequence[pa.Table], keys: Sequence[str], estimate: int | None = None
    ) -> Stored:
        table = self.union(frames)  # the tables' chunks, shared
        return Stored(table, table.num_rows, table)

    def release(self, frame: pa.Table) -> None:
        return None

    def nbytes(self, frame: pa.Table) -> int:
        return frame.nbytes

    def schema(self, frame: pa.Table) -> pa.Schema:
        return frame.schema

    def map_arrow(
        self, frame: pa.Table, function: Callable[[pa.Table], pa.Table], schema: pa.Schema
    ) -> pa.Table:
        return function(frame).select(schema.names).cast(schema)

    def union(self, frames: Sequence[pa.Table]) -> pa.Table:
        first = frames[0].schema
        return pa.concat_tables(
            [frames[0]]
            + [
                f if f.schema.equals(first) else f.select(first.names).cast(first)
                for f in frames[1:]
            ]
        )

    def append_time(self, frame: pa.Table, name: str, value: int) -> pa.Table:
        # Arrow shares the existing columns: only the new constant column is allocated.
        column = pa.repeat(pa.scalar(value, pa.int64()), frame.num_rows)
        return frame.add_column(frame.schema.get_field_index("__diff__"), name, column)

    def set_time(self, frame: pa.Table, name: str, value: int) -> pa.Table:
        # Arrow shares the other columns: only the constant column is allocated.
        column = pa.repeat(pa.scalar(value, pa.int64()), frame.num_rows)
        return frame.set_column(frame.schema.get_field_index(name), name, column)

    def fanout(self, branches: Sequence[Sequence[tuple[str, exp.Expr]]]) -> exp.Expression:
        structs = [
            exp.Struct(
                expressions=[
                    exp.PropertyEQ(this=exp.to_identifier(name, quoted=True), expression=e)
                    for name, e in branch
                ]
            )
            for branch in branches
        ]
        return exp.Anonymous(
            this="UNNEST",
            expressions=[
                exp.Array(expressions=structs),
                exp.Kwarg(this=exp.var("recursive"), expression=exp.true()),
            ],
        )


def _placeholder(name: str, salt: int = 0) -> str:
    """The name a prepared query reads input `name` under, until `run` binds it (`salt`:
    another such name, where the query's text holds the first)."""
    return f"__dsql_input_{name}__" if not salt else f"__dsql_input_{name}_{salt}__"


def _source(
    con: Any, registered: dict[str | tuple[str, str], Any], name: str, frame: pa.Table | None
) -> str:
    """The quoted name under which `frame` (input `name`) is registered on `con`.

    DuckDB builds with `_register_source` register an Arrow table under a fresh name
    in microseconds (a named `register` costs a fifth of a millisecond): the handle,
    kept in `registered` while the input holds that frame, keeps it readable. Other
    builds register under the input's name. A missing input reads its own name (the
    engine reports it as unknown).
    """
    if frame is None:
        return f'"{name}"'
    entry = registered.get(("source", name))
    if entry is not None and entry[0] is frame:
        return entry[1]
    register = getattr(con, "_register_source", None)
    if register is None:
        if registered.get(name) is not frame:
            con.register(name, frame)
            registered[name] = frame
        return f'"{name}"'
    handle = register(frame, None)
    quoted = '"' + handle.name.replace('"', '""') + '"'
    registered[("source", name)] = (frame, quoted, handle)
    return quoted


def _arrow_result(con: Any, text: str, limit: int) -> pa.Table:
    """The rows of one SELECT as an Arrow table, read batch by batch; a result of more
    than `limit` bytes stops the query with `memory.exceeded`.

    DuckDB builds whose connection has `_submit` (the statement run straight to an
    Arrow result) skip the relation layer's parse and bind of the text, a third of a
    small statement's cost; other builds go through `sql()`. Either streams: DuckDB
    computes the next batch only when it is read (a materialized result would be held
    whole, outside DuckDB's memory limit).
    """
    submit = getattr(con, "_submit", None)
    if submit is not None:
        result = submit(text, None, "stream", _BATCH_ROWS)
        description = result.description  # read before the result is consumed
        reader = result.arrow_reader()
    else:
        relation = con.sql(text)
        description = relation.description
        reader = relation.fetch_record_batch(_BATCH_ROWS)
    batches, size = [], 0
    for batch in reader:
        size += batch.nbytes
        if size > limit:
            reader.close()  # the rest is never computed
            raise memory.exceeded(limit, f"its result passed {size >> 20}MB")
        batches.append(batch)
    return _spark_types(pa.Table.from_batches(batches, reader.schema), description)


#: Rows per Arrow record batch of a result (DuckDB's default).
_BATCH_ROWS = 131072

#: DuckDB's words for an integer past its type's range (arithmetic, or a cast of a float
#: or a decimal), and the type, which `_OUT_OF_RANGE` names as PostgreSQL does.
_OVERFLOW = re.compile(
    r"(?:Overflow in \w+ of |out of range for the destination type "
    r"|Failed to cast decimal value \S+ to type )(INT16|INT32|INT64)\b"
)
#: DuckDB's words for a value past a decimal's digits: a cast (from a number or from
#: text), arithmetic on decimals or on the 128-bit integers numerics are computed in,
#: or a product of more than 38 digits after the point.
_DECIMAL_OVERFLOW = re.compile(
    r"to (?:type )?DECIMAL\((\d+),\d+\)(?: failed: value is out of range)?"
    r"|Overflow in (?:\w+ of )?(?:DECIMAL|INT128|HUGEINT)|Overflow in HUGEINT"
    r"|Needed scale \d+ to accurately represent"
)


def _numeric_overflow(message: str) -> ExecutionError | None:
    """PostgreSQL's "numeric field overflow" for DuckDB's decimal overflow in `message`
    (None for another error, or for text that is no number at all): past a
    numeric(p, s) of the user's, or past dsql's 38 digits (`errors.NUMERIC_LIMIT`)."""
    found = _DECIMAL_OVERFLOW.search(message)
    if found is None:
        return None
    text = re.search(r'Could not convert string "([^"]*)"', message)
    if text is not None and not _is_number(text.group(1)):
        return None
    if found.group(1) is not None and int(found.group(1)) < MAX_DIGITS:
        # A cast of the query's, or the narrower type variance squares its argument in.
        return ExecutionError(
            NUMERIC_OVERFLOW,
            hint=f"the value has more digits than numeric({found.group(1)}, s) allows; "
            + NUMERIC_LIMIT,
        )
    return numeric_overflow()


def _is_number(text: str) -> bool:
    try:
        return Decimal(text.strip()).is_finite()
    except InvalidOperation:
        return False


#: The digits of DuckDB's widest decimal, dsql's numeric.
MAX_DIGITS = 38
_OUT_OF_RANGE = {"INT16": "smallint", "INT32": "integer", "INT64": "bigint"}


def _spark_types(table: pa.Table, description: Sequence[Any]) -> pa.Table:
    """Align DuckDB's result types with Spark's where they differ.

    DuckDB sums integers into HUGEINT; Spark into BIGINT. Results must not depend on
    the kernel, so such columns (and struct fields) become int64, an overflow an error
    as in Spark's ANSI mode. Arrow shows HUGEINT as decimal128(38, 0), like
    numeric(38, 0) (PostgreSQL's sum of bigints), so the result's DuckDB types
    (`description`) tell them apart.
    """
    kinds = [d[1] for d in description]
    if not any(_has_hugeint(k) for k in kinds):
        return table
    columns = [_narrowed(c, k) for c, k in zip(table.columns, kinds, strict=True)]
    return pa.Table.from_arrays(columns, names=table.column_names)


def _has_hugeint(kind: Any) -> bool:
    if kind.id == "hugeint":
        return True
    return kind.id == "struct" and any(_has_hugeint(t) for _, t in kind.children)


def _narrowed(column: Any, kind: Any) -> Any:
    """A column with its HUGEINT values (at any struct depth) as int64."""
    if not _has_hugeint(kind):
        return column
    if kind.id == "hugeint":
        try:
            return column.cast(pa.int64())
        except pa.ArrowInvalid:
            raise ExecutionError(
                "bigint out of range", hint="cast to numeric or double for larger values"
            ) from None
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    out = []
    for chunk in chunks:
        fields = [_narrowed(chunk.field(i), t) for i, (_, t) in enumerate(kind.children)]
        names = [n for n, _ in kind.children]
        out.append(pa.StructArray.from_arrays(fields, names=names, mask=chunk.is_null()))
    return (
        pa.chunked_array(out)
        if out
        else column.cast(
            pa.struct(
                [
                    pa.field(n, pa.int64() if t.id == "hugeint" else column.type.field(n).type)
                    for n, t in kind.children
                ]
            )
        )
    )
