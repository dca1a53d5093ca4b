"""Steps over small Arrow tables done in the driver, without a DuckDB statement.

A DuckDB statement costs 0.3-1 ms even over one row (parse, bind, plan, Arrow in and
out), while a round of a small view moves a few rows through several steps. The two
steps that need no SQL expression are done here when their input is small and of
plain types, with exactly the result the kernel's query would give:

- `consolidate`: the union of tables, times advanced to a frontier (when given),
  equal (row, time) pairs summed, zero sums dropped (`relational.consolidate` and
  `relational.advance`);
- `project`: columns selected and renamed, rows with NULL in some columns dropped (a
  linear chain that only does that, `Linear.selection`).

Invariant: each returns None, never an approximation, when it cannot match the query
exactly: too many rows, or a column of a type whose equality or round trip through
the engine Python does not reproduce (floating point: NaN groups with NaN in DuckDB;
nested, decimal and temporal types beyond `date32`).

>>> import pyarrow as pa
>>> t = pa.table({"x": [1, 1, 2], "__time__": [3, 3, 3], "__diff__": [1, -1, 2]})
>>> consolidate([t], ("x",), 1, None).to_pylist()
[{'x': 2, '__time__': 3, '__diff__': 2}]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from dsql.runtime.lattice import DIFF, Antichain, advance_by, time_columns

#: At most this many rows are consolidated in Python (beyond it a query is cheaper).
SMALL_ROWS = 256

#: Types whose values Python compares exactly as the engines do, and which every kernel
#: passes through a projection unchanged.
PLAIN_TYPES = frozenset(
    (
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.bool_(),
        pa.string(),
        pa.date32(),
    )
)


@dataclass(frozen=True, slots=True)
class Selection:
    """A linear chain that only keeps rows whose `not_null` columns are not NULL and
    outputs `(name, input column)` for each pair of `renames` (`Linear.selection`)."""

    renames: tuple[tuple[str, str], ...]
    not_null: tuple[str, ...] = ()


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def plain(schema: pa.Schema, names: Sequence[str]) -> bool:
    """Whether every named column is of a plain type (see `PLAIN_TYPES`)."""
    return all(schema.field(n).type in PLAIN_TYPES for n in names)


def consolidate(
    tables: Sequence[pa.Table],
    columns: Sequence[str],
    depth: int,
    frontier: Antichain | None,
    signs: Sequence[int] | None = None,
) -> pa.Table | None:
    """The consolidated union of `tables` (times advanced to `frontier` when given, the
    diffs of table `i` multiplied by `signs[i]` when given), or None when it is not
    small and plain (see module docstring).

    Output columns: `columns`, the time columns, `__diff__`, all nullable, as the
    kernel's query gives them; rows in order of first appearance.
    """
    if sum(t.num_rows for t in tables) > SMALL_ROWS:
        return None
    times = time_columns(depth)
    names = [*columns, *times, DIFF]
    signed = zip(tables, signs or [1] * len(tables), strict=True)
    parts = [_signed(t.select(names), sign) for t, sign in signed if t.num_rows]
    if not parts:
        return _nullable(tables[0].select(names)) if tables else None
    types = [f.type for f in parts[0].schema][:-1]
    if any([f.type for f in p.schema][:-1] != types for p in parts[1:]):
        return None  # the query would unify the types
    if not all(pa.types.is_integer(p.schema.field(DIFF).type) for p in parts):
        return None
    parts = [_nullable(p, DIFF) for p in parts]  # diffs as int64, whatever their width
    table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
    if not plain(table.schema, columns):
        return None
    stamps = list(zip(*(table[t].to_pylist() for t in times), strict=True))
    if frontier:
        stamps = [advance_by(s, frontier) for s in stamps]
    data = list(zip(*(table[c].to_pylist() for c in columns), stamps, strict=True))
    first: dict[tuple, int] = {}
    sums: dict[tuple, int] = {}
    for i, (row, diff) in enumerate(zip(data, table[DIFF].to_pylist(), strict=True)):
        if row in sums:
            sums[row] += diff
        else:
            first[row] = i
            sums[row] = diff
    keep = [(i, sums[row]) for row, i in first.items() if sums[row] != 0]
    if any(not _INT64_MIN <= d <= _INT64_MAX for _, d in keep):
        return None  # the query reports the overflow
    out = table.take(pa.array([i for i, _ in keep], pa.int64()))
    arrays = [out[c] for c in columns]
    if frontier:
        arrays += [pa.array([data[i][-1][k] for i, _ in keep], pa.int64()) for k in range(depth)]
    else:
        arrays += [out[t] for t in times]
    arrays.append(pa.array([d for _, d in keep], pa.int64()))
    return pa.Table.from_arrays(arrays, schema=_nullable_schema(table.schema))


def project(table: pa.Table, selection: Selection) -> pa.Table | None:
    """The rows `selection` keeps, as `SELECT source AS name, ... WHERE c IS NOT NULL ...`
    gives them, or None when a column is not of a plain type (the engine might change
    its type on the way through)."""
    fields = []
    for name, source in selection.renames:
        field = table.schema.field(source)
        if field.type not in PLAIN_TYPES:
            return None
        fields.append(pa.field(name, field.type))
    for name in selection.not_null:
        if table[name].null_count:
            table = table.filter(pc.is_valid(table[name]))
    arrays = [table[source] for _, source in selection.renames]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def rows_with_keys(table: pa.Table, keys: Sequence[str], probe: pa.Table) -> pa.Table | None:
    """The rows of `table` whose `keys` equal those of some row of `probe`, NULL equal to
    NULL as in the engine's `IS NOT DISTINCT FROM`; None for keys not of a plain type, or
    several keys with a NULL in `probe` (Arrow's join never matches NULLs)."""
    if not (plain(table.schema, keys) and plain(probe.schema, keys)):
        return None
    if len(keys) == 1:
        (key,) = keys
        return table.filter(pc.is_in(table[key], value_set=pc.unique(probe[key])))
    if any(probe[k].null_count for k in keys):
        return None
    distinct = probe.select(list(keys)).group_by(list(keys), use_threads=False).aggregate([])
    matched = table.join(distinct, keys=list(keys), join_type="left semi", use_threads=False)
    return matched.select(table.column_names)


def _signed(table: pa.Table, sign: int) -> pa.Table:
    if sign == 1:
        return table
    diffs = pc.multiply(table[DIFF], pa.scalar(sign, pa.int64()))
    return table.set_column(table.schema.get_field_index(DIFF), DIFF, diffs)


def _nullable_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type) for f in schema])


def _nullable(table: pa.Table, diff: str | None = None) -> pa.Table:
    """`table` with nullable fields; with `diff`, that column cast to int64."""
    columns, schema = table.columns, _nullable_schema(table.schema)
    if diff is not None and schema.field(diff).type != pa.int64():
        i = schema.get_field_index(diff)
        columns[i] = columns[i].cast(pa.int64())
        schema = schema.set(i, pa.field(diff, pa.int64()))
    return pa.Table.from_arrays(columns, schema=schema)
