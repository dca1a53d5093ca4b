"""Delta Lake sink targets: a sink's closed milliseconds as commits to a Delta table.

`CREATE SINK k FROM v INTO DELTA 'path' [KEY (a) ENVELOPE UPSERT]` writes what a FILES
sink writes (`dsql.sinks`), into a Delta table made with `deltalake` (delta-rs; no
Spark needed):

- the diff envelope appends each flush's changes (`mz_timestamp`, `mz_diff`, then the
  relation's columns) in one commit;
- the upsert envelope keeps the table equal to the relation's current rows by key: each
  flush is one merge on the key columns (NULL keys match NULL keys) that updates or
  inserts each key whose last state in the flush is 'upsert' and deletes each whose
  last state is 'delete' or 'key_violation' (the table has room for one row per key).

Exactly once: each flush is one Delta commit that carries, in the same atomic log
entry, an application transaction (`txn`: app id `dsql-sink-<name>`, version the last
millisecond the flush covers). That version is the sink's progress, read back from the
table when the sink is made again (a data directory's recovery), so a millisecond is
in the table once whatever moment a crash hits. The table is created (empty, no
progress) when the sink is, so a type Delta has no counterpart for (interval) is
refused by CREATE SINK.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlglot import exp

from dsql.delta_source import delta_failures
from dsql.errors import SourceError, UnsupportedError
from dsql.runtime.lattice import DIFF


class DeltaTarget:
    """A Delta table one commit per flush (module docstring)."""

    #: Logged in the data directory and recovered with it.
    kept = True

    def __init__(self, path: Path, name: str, key: tuple[str, ...] | None) -> None:
        self.path, self.key = path, key
        #: The application id of the sink's commits: their `txn` version is its progress.
        self.app_id = f"dsql-sink-{name}"
        if path.exists() and not path.is_dir():
            raise SourceError(f"sink table {path} is a file", hint="give a directory's path")
        if path.is_dir() and any(path.iterdir()) and not (path / "_delta_log").is_dir():
            raise SourceError(
                f"{path} is not a Delta table (it has files but no _delta_log)",
                hint="give an empty directory, a new path, or a Delta table",
            )

    def prepare(self, schema: pa.Schema) -> None:
        """Create the table with the envelope's columns for `schema` (the sink's
        subscription's: `mz_timestamp`, `mz_diff`, columns) unless it exists; an
        existing one must have those columns."""
        from deltalake import DeltaTable, write_deltalake

        wanted = self._schema(schema)
        for f in wanted:
            if pa.types.is_interval(f.type):
                raise UnsupportedError(
                    f'column "{f.name}" is an interval, which a Delta table cannot hold',
                    hint="sink a view that casts it to text",
                )
        for name in self.key or ():
            if pa.types.is_list(schema.field(name).type):
                raise UnsupportedError(
                    f'key column "{name}" is an array, which a Delta merge cannot match on',
                    hint="key the sink by scalar columns",
                )
        if (self.path / "_delta_log").is_dir():
            have = pa.schema(DeltaTable(str(self.path)).schema().to_arrow())
            if have.names != wanted.names:
                raise SourceError(
                    f"Delta table {self.path} has columns ({', '.join(have.names)}), "
                    f"not the sink's ({', '.join(wanted.names)})",
                    hint="sink into a new path",
                )
            return
        try:
            write_deltalake(str(self.path), wanted.empty_table(), mode="append")
        except delta_failures() as error:
            raise SourceError(f"cannot create Delta table {self.path}: {error}") from None

    def _schema(self, schema: pa.Schema) -> pa.Schema:
        """The table's columns: the diff envelope's, or the relation's for upsert."""
        fields = [f.with_nullable(True) for f in schema]
        return pa.schema(fields if self.key is None else fields[2:])

    def _table(self) -> Any:
        from deltalake import DeltaTable

        if not (self.path / "_delta_log").is_dir():
            return None
        return DeltaTable(str(self.path))

    def progress(self) -> int | None:
        table = self._table()
        return None if table is None else table.transaction_version(self.app_id)

    def contents(self, columns: list[str], key: tuple[str, ...] | None) -> pa.Table:
        from dsql.sinks import accumulated

        rows = self._table().to_pyarrow_table()
        if key is None:
            return accumulated(rows, columns)
        ones = pa.array([1] * rows.num_rows, pa.int64())
        return pa.table([ones, *(rows[c] for c in columns)], names=[DIFF, *columns])

    def write(self, first: int, last: int, changes: pa.Table) -> None:
        from deltalake import CommitProperties, Transaction, write_deltalake

        commit = CommitProperties(app_transactions=[Transaction(self.app_id, last)])
        try:
            if self.key is None:
                write_deltalake(str(self.path), changes, mode="append", commit_properties=commit)
            else:
                self._merge(_last_states(changes, self.key), commit)
        except delta_failures() as error:
            raise SourceError(f"cannot write Delta table {self.path}: {error}") from None

    def _merge(self, states: pa.Table, commit: Any) -> None:
        """One merge commit: each key in `states` takes its last state. A merge that
        changes no row makes no commit in delta-rs: an empty append then carries the
        progress (the merge changed nothing, so the two are still one change)."""
        from deltalake import write_deltalake

        assert self.key is not None
        columns = states.column_names[1:]
        on = " AND ".join(f"t.{_q(k)} IS NOT DISTINCT FROM s.{_q(k)}" for k in self.key)
        values = {_q(c): f"s.{_q(c)}" for c in columns}
        upsert = "s.mz_state = 'upsert'"
        table = self._table()
        before = table.version()
        (
            table.merge(states, on, source_alias="s", target_alias="t", commit_properties=commit)
            .when_matched_update(values, predicate=upsert)
            .when_matched_delete(predicate=f"NOT ({upsert})")
            .when_not_matched_insert(values, predicate=upsert)
            .execute()
        )
        if self._table().version() == before:
            empty = states.select(columns).schema.empty_table()
            write_deltalake(str(self.path), empty, mode="append", commit_properties=commit)

    def into(self) -> str:
        """The INTO clause that names this target again."""
        return f"INTO DELTA {exp.Literal.string(str(self.path)).sql('postgres')}"

    def describe(self) -> str:
        return f"delta {self.path}"

    def close(self) -> None:
        """Nothing held open between flushes."""


def _last_states(changes: pa.Table, key: tuple[str, ...]) -> pa.Table:
    """The upsert envelope's rows (in time order) reduced to each key's last one, without
    `mz_timestamp`."""
    rows = changes.drop_columns(["mz_timestamp"])
    keys = list(zip(*(rows[k].to_pylist() for k in key), strict=True))
    last = {k: i for i, k in enumerate(keys)}
    return rows.take(pa.array(sorted(last.values()), pa.int64()))


def _q(name: str) -> str:
    """`name` as a quoted identifier in delta-rs's (DataFusion's) SQL."""
    return '"' + name.replace('"', '""') + '"'


__all__ = ["DeltaTarget"]
