"""Reduce: per-key logic over accumulated groups, exact for partially ordered times.

For every key and time `t`, the output accumulated at `t` must equal
`logic(key, input accumulated at t)` (nothing at all when the group is empty:
the logic is never called on an empty group).

When new input updates arrive for a key, the output may have to change at their
times and at every time that is a lattice join of theirs with times already in
the key's history (the "interesting times" of seed 000). For product times
(a product of chains) every such join lies on the *grid* of the key's
per-coordinate time values, and accumulations are constant between grid points,
so the operator works on the grid:

1. candidates: grid points `>=` some new time (or some time left pending);
2. ready candidates are those the frontier has passed; the rest stay pending;
3. at each ready candidate: `E = logic(accumulated input) - accumulated output`;
4. the corrections are the Möbius inversion of `E` over the grid: for one
   coordinate, `E(t) - E(previous candidate)`; for `d` coordinates, the
   inclusion-exclusion over the `2^d` predecessor combinations.

Every step is a relational query (joins on key, group-bys), written once.
The logic is a `ReduceLogic`: SQL aggregates, distinct/threshold/count, or a
Python function over Arrow groups (the documented slow path).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from sqlglot import exp, parse_one

from dsql.runtime import relational as rel
from dsql.runtime.arrangement import Arranged, TracedNode
from dsql.runtime.dataflow import Batch, Round
from dsql.runtime.kernel.base import Frame
from dsql.runtime.lattice import DIFF, Antichain, time_columns
from dsql.runtime.operators.reduce_logic import ReduceLogic
from dsql.runtime.trace import Trace


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _list(names: Sequence[str], prefix: str = "") -> str:
    return ", ".join(f"{prefix}{_q(n)}" for n in names)


def _keys_match(a: str, b: str, keys: Sequence[str]) -> str:
    return " AND ".join(f"{a}.{_q(k)} <=> {b}.{_q(k)}" for k in keys) or "TRUE"


def _accumulate_at(
    candidates: str,
    source: str,
    keys: Sequence[str],
    cols: Sequence[str],
    depth: int,
    negate: bool = False,
) -> str:
    """Per candidate (keys, time), the rows of `source` accumulated at that time."""
    times = time_columns(depth)
    kt = [*keys, *times]
    values = _list(cols, "s.") + ", " if cols else ""
    total = f"{'-' if negate else ''}CAST(SUM(s.{_q(DIFF)}) AS BIGINT)"
    at_most = rel.times_at_most("s", "c", depth).sql("spark")
    group = _list(kt, "c.") + (", " + _list(cols, "s.") if cols else "")
    return (
        f"SELECT {_list(kt, 'c.')}, {values}{total} AS {_q(DIFF)} "
        f"FROM ({candidates}) c JOIN {source} s ON {_keys_match('c', 's', keys)} AND {at_most} "
        f"GROUP BY {group} HAVING SUM(s.{_q(DIFF)}) <> 0"
    )


class ReduceNode(TracedNode):
    """Applies a `ReduceLogic` per key (see module docstring); its output is arranged by key."""

    def __init__(self, source: Arranged, logic: ReduceLogic) -> None:
        self.keys = source.keys
        self.logic = logic
        self.source_values = source.values
        schema = logic.output_schema(source)
        super().__init__(source.worker, (source,), schema, source.depth)
        self._trace = Trace(self.kernel, self.columns, self.keys, self.depth)
        self._pending: Frame | None = None
        self._pending_lower = Antichain()

    def describe(self) -> str:
        return f"Reduce(keys={', '.join(self.keys) or '()'}, {self.logic.describe()})"

    # --- the round -----------------------------------------------------------------
    def step(self, rnd: Round) -> Batch | None:
        self.current = None
        source = self.inputs[0]
        assert isinstance(source, Arranged)
        woken = any(rnd.frontier.complete(t) for t in self._pending_lower)
        if source.current is None and not woken:
            return None
        frames: dict[str, Frame] = {}
        input_frames = source.history() + ([source.current.frame] if source.current else [])
        if not input_frames:
            return None
        for i, f in enumerate(input_frames):
            frames[f"i{i}"] = f
        for i, f in enumerate(self._trace.frames()):
            frames[f"o{i}"] = f
        new_sources = []
        if source.current is not None:
            frames["delta"] = source.current.frame
            new_sources.append("delta")
        if self._pending is not None:
            frames["pending"] = self._pending
            new_sources.append("pending")

        d = self.depth
        keys, vals, times = self.keys, self.source_values, time_columns(d)
        kt = [*keys, *times]
        new_times = " UNION ".join(f"SELECT DISTINCT {_list(kt)} FROM {s}" for s in new_sources)
        affected = f"SELECT DISTINCT {_list(keys)} FROM ({new_times}) nt"
        inputs_all = " UNION ALL ".join(
            f"SELECT {_list([*keys, *vals, *times, DIFF])} FROM i{i}"
            for i in range(len(input_frames))
        )
        outputs_all = " UNION ALL ".join(
            f"SELECT {_list(self.all_columns())} FROM o{i}"
            for i in range(len(self._trace.frames()))
        )
        # H: the input history of the affected keys, materialized once.
        hist_sql = (
            f"SELECT h.* FROM ({inputs_all}) h JOIN ({affected}) k ON {_keys_match('h', 'k', keys)}"
        )
        frames["hist"] = self._store(hist_sql, frames, keys)

        # Grid values per coordinate, at or beyond the least new value of that coordinate.
        lows = ", ".join(f"MIN({_q(t)}) AS {_q('lo_' + t)}" for t in times)
        frames["lo"] = self._store(
            f"SELECT {_list(keys)}, {lows} FROM ({new_times}) nt GROUP BY {_list(keys)}",
            frames,
            keys,
        )
        grid_sources = (
            f"SELECT {_list(kt)} FROM hist UNION ALL SELECT {_list(kt)} FROM ({new_times}) nt"
        )
        # Stored once: the candidates and the predecessors both read them.
        value_sql: dict[str, str] = {}
        for c, t in enumerate(times):
            frames[f"gv{c}"] = self._store(
                f"SELECT DISTINCT {_list(keys, 'g.')}{', ' if keys else ''}g.{_q(t)} "
                f"FROM ({grid_sources}) g JOIN lo ON {_keys_match('g', 'lo', keys)} "
                f"WHERE g.{_q(t)} >= lo.{_q('lo_' + t)}",
                frames,
                keys,
            )
            value_sql[t] = f"SELECT * FROM gv{c}"
        # Candidates: grid points >= some new time.
        grid = f"SELECT {_list(keys, 'v0.')}{', ' if keys else ''}v0.{_q(times[0])}"
        grid_from = f"({value_sql[times[0]]}) v0"
        for c, t in enumerate(times[1:], start=1):
            grid += f", v{c}.{_q(t)}"
            grid_from += f" JOIN ({value_sql[t]}) v{c} ON {_keys_match('v0', f'v{c}', keys)}"
        candidates = f"{grid} FROM {grid_from}"
        if d > 1:
            above = " AND ".join(f"c.{_q(t)} >= n.{_q(t)}" for t in times)
            candidates = (
                f"SELECT DISTINCT c.* FROM ({candidates}) c JOIN ({new_times}) n "
                f"ON {_keys_match('c', 'n', keys)} AND {above}"
            )
        frames["cand"] = self._store(candidates, frames, keys)
        not_ready = rel.beyond(rnd.frontier, d).sql(dialect="spark")
        ready = f"SELECT * FROM cand WHERE NOT {not_ready}"

        # Predecessors of each coordinate on the grid.
        preds = []
        for t in times:
            part = ", ".join([*(_q(k) for k in keys)])
            order = f"PARTITION BY {part} ORDER BY {_q(t)}" if keys else f"ORDER BY {_q(t)}"
            preds.append(
                f"SELECT {_list(keys)}{', ' if keys else ''}{_q(t)}, "
                f"LAG({_q(t)}) OVER ({order}) AS {_q('p_' + t)} FROM ({value_sql[t]}) v"
            )
        with_preds = "SELECT r.*" + "".join(f", p{c}.{_q('p_' + t)}" for c, t in enumerate(times))
        with_preds += " FROM (" + ready + ") r"
        for c, t in enumerate(times):
            with_preds += (
                f" JOIN ({preds[c]}) p{c} ON {_keys_match('r', f'p{c}', keys)}"
                f" AND r.{_q(t)} = p{c}.{_q(t)}"
            )

        # E = logic(accumulated input) - accumulated output, at every ready candidate.
        accumulated = _accumulate_at(ready, "hist", keys, vals, d)
        out_cols = self.values
        frames["acc"] = self._store(accumulated, frames, keys)
        desired = self.logic.desired(self.kernel, frames["acc"], keys, vals, d, self.schema)
        frames["desired"] = desired
        current = _accumulate_at(ready, f"({outputs_all})", keys, out_cols, d, negate=True)
        allc = [*keys, *out_cols, *times]
        error_parts = [f"SELECT {_list(allc)}, {_q(DIFF)} FROM desired"]
        if self._trace.frames():
            error_parts.append(f"SELECT {_list(allc)}, {_q(DIFF)} FROM ({current}) cur")
        errors = (
            f"SELECT {_list(allc)}, CAST(SUM({_q(DIFF)}) AS BIGINT) AS {_q(DIFF)} FROM ("
            + " UNION ALL ".join(error_parts)
            + f") u GROUP BY {_list(allc)} HAVING SUM({_q(DIFF)}) <> 0"
        )
        frames["err"] = self._store(errors, frames, keys)

        # Corrections: Möbius inversion of E over the grid (the 2^d terms share `preds`).
        frames["preds"] = self._store(with_preds, frames, keys)
        terms = []
        for size in range(d + 1):
            for subset in itertools.combinations(range(d), size):
                sign = "-" if size % 2 else ""
                match = " AND ".join(
                    f"e.{_q(t)} = p.{_q('p_' + t) if c in subset else _q(t)}"
                    for c, t in enumerate(times)
                )
                terms.append(
                    f"SELECT {_list(keys, 'p.')}{', ' if keys else ''}"
                    f"{_list(out_cols, 'e.') + ', ' if out_cols else ''}{_list(times, 'p.')}, "
                    f"{sign}e.{_q(DIFF)} AS {_q(DIFF)} FROM preds p JOIN err e "
                    f"ON {_keys_match('p', 'e', keys)} AND {match}"
                )
        out_all = [*keys, *out_cols, *times]
        corrections = (
            f"SELECT {_list(out_all)}, CAST(SUM({_q(DIFF)}) AS BIGINT) AS {_q(DIFF)} FROM ("
            + " UNION ALL ".join(terms)
            + f") t GROUP BY {_list(out_all)} HAVING SUM({_q(DIFF)}) <> 0"
        )
        ordered = f"SELECT {_list(self.all_columns())} FROM ({corrections}) c"
        stored = self.kernel.materialize(self._run(ordered, frames), keys)
        output, rows = stored.frame, stored.rows

        # Pending: candidates the frontier has not passed.
        pending = self._store(f"SELECT {_list(kt)} FROM cand WHERE {not_ready}", frames, keys)
        old_pending = self._pending
        self._set_pending(pending, d)
        grid_values = [f"gv{c}" for c in range(d)]
        for name in ("hist", "lo", "cand", "acc", "err", "preds", *grid_values):
            self.kernel.release(frames[name])
        if old_pending is not None:
            self.kernel.release(old_pending)
        if rows == 0:
            self.kernel.release(output)
            return None
        self.current = Batch(output, rows, stored.table)
        return self.current

    def pending(self) -> tuple[tuple[int, ...], ...]:
        return self._pending_lower.elements

    def _set_pending(self, pending: Frame, depth: int) -> None:
        times = time_columns(depth)
        query = parse_one(f"SELECT DISTINCT {_list(times)} FROM pending", read="spark")
        lower = self.kernel.to_arrow(self.kernel.query(query, {"pending": pending}))
        if lower.num_rows == 0:
            self.kernel.release(pending)
            self._pending, self._pending_lower = None, Antichain()
            return
        rows = zip(*(lower[t].to_pylist() for t in times), strict=True)
        self._pending = pending
        self._pending_lower = Antichain(tuple(r) for r in rows)

    def _store(self, sql: str, frames: dict[str, Frame], keys: Sequence[str]) -> Frame:
        return self.kernel.materialize(self._run(sql, frames), keys).frame

    def _run(self, sql: str, frames: dict[str, Frame]) -> Frame:
        query = parse_one(sql, read="spark")
        used = {t.name for t in query.find_all(exp.Table)}
        return self.kernel.query(query, {k: v for k, v in frames.items() if k in used})

    def release(self) -> None:
        super().release()
        if self._pending is not None:
            self.kernel.release(self._pending)
