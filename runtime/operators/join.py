"""Join of two arrangements on their keys, by the delta rule.

With `dA`, `dB` this round's batches and `A`, `B` the histories before it,
the change to `A ⋈ B` is

    dA ⋈ (B + dB)  +  A ⋈ dB

Each matched pair yields the left row (keys, values), the right values, the
lattice join of the two times and the product of the diffs, so the rule is exact
for any number of times per batch and for partially ordered times. Keys match as
data (NULL equals NULL); SQL's NULL-rejecting equality is the planner's business.

`kind="semi"` keeps only the left columns (diffs still multiply: the right side
is usually a set).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
from sqlglot import exp

from dsql.errors import SchemaError
from dsql.runtime import relational as rel
from dsql.runtime.arrangement import Arranged
from dsql.runtime.dataflow import Batch, Node, Round, schema_key
from dsql.runtime.kernel.base import Capability, Frame, Kernel, Prepared
from dsql.runtime.kernel.driver import JoinShape
from dsql.runtime.linear import STABLE_TYPES

if TYPE_CHECKING:
    from dsql.runtime.collection import LinearNode  # collection imports this module

#: A delta of at most this many rows reads only its keys' rows of the other side's
#: history, when the kernel can pick them by index (`Arranged.history_with_keys`).
PROBE_ROWS = 100_000


class JoinNode(Node):
    """The delta-rule join of two arranged inputs (see module docstring)."""

    always_run = False

    def __init__(self, left: Arranged, right: Arranged, kind: str = "inner") -> None:
        if len(left.keys) != len(right.keys):
            raise SchemaError(
                f"join keys differ in number: ({', '.join(left.keys)}) "
                f"and ({', '.join(right.keys)})"
            )
        if left.depth != right.depth:
            raise SchemaError("cannot join collections of different scopes", hint="use enter()")
        self.kind = kind
        self.pairs = tuple(zip(left.keys, right.keys, strict=True))
        right_values = right.values if kind == "inner" else ()
        clash = sorted(set(left.columns) & set(right_values))
        if clash:
            raise SchemaError(
                f"join output would have duplicate column(s) {', '.join(clash)}",
                hint="rename the columns of one side with map(... AS ...) before joining",
            )
        self.right_values = right_values
        check_key_types(left.schema, left.keys, right.schema, right.keys)
        worker, kernel = left.worker, left.kernel
        self._shape = (self.pairs, left.columns, right_values, left.depth, kind)
        schema = static_join_schema(left.schema, right.schema, right_values)
        if schema is None:
            schema = kernel.cached(
                ("join-schema", *self._shape, schema_key(left.schema), schema_key(right.schema)),
                lambda: worker.output_schema(
                    prepare_join(kernel, self._shape), {"l": left, "r": right}
                ),
            )
        super().__init__(worker, (left, right), schema, left.depth)

    @property
    def query(self) -> Prepared:
        """The join as a prepared query over the batches `l` and `r`, rendered once per
        shape (and only when a round needs it: small batches join in the driver)."""
        return prepare_join(self.kernel, self._shape)

    def step(self, rnd: Round) -> Batch | None:
        left, right = self.inputs
        assert isinstance(left, Arranged) and isinstance(right, Arranged)
        reader = self.readers[0] if self.consumers == 1 else None
        # A reader applied by its producer is a linear chain (`LinearNode`).
        applied = reader is not None and reader.applied_by_producer
        fused = cast("LinearNode", reader) if applied else None
        if fused is not None and fused.dropped:
            fused = None
        halves = self._halves(left, right)
        small = self._in_driver(halves)
        if small is not None:  # no query: the reader's chain too when it only renames
            if not small:
                return None
            frame = self.kernel.union(small) if len(small) > 1 else small[0]
            renamed = fused.renamed(frame) if fused is not None else None
            if renamed is not None:
                return Batch(renamed, self.kernel.rows(renamed), applied=fused)
            return Batch(frame, self.kernel.rows(frame))
        null_safe = not self._keys_null_free(halves)
        if fused is not None:  # run the reader's chain in our query
            query = fused.over(
                lambda: self._probe_query(null_safe), ("join-linear", *self._shape, null_safe)
            )
        else:
            query = prepare_join(self.kernel, self._shape, null_safe)
        parts: list[Frame] = []
        lk, rk = self.pairs[0] if self.pairs else (None, None)
        for lhs, rhs in halves:
            if left.current is not None and lhs[0] is left.current.frame:  # dA with B + dB
                for side in self._apart(rhs, lhs[0]):
                    probed = self._probe(side, rk, left.current, lk)
                    parts.append(self.kernel.query(query, {"l": lhs[0], "r": probed}))
            else:  # A with dB
                assert right.current is not None
                for side in self._apart(lhs, rhs[0]):
                    probed = self._probe(side, lk, right.current, rk)
                    parts.append(self.kernel.query(query, {"l": probed, "r": rhs[0]}))
        if not parts:
            return None
        return Batch(self.kernel.union(parts) if len(parts) > 1 else parts[0], applied=fused)

    def _halves(self, left: Arranged, right: Arranged) -> list[tuple[list[Frame], list[Frame]]]:
        """The delta rule's halves as (left frames, right frames): `dA` with `B + dB`, then
        `A` with `dB` (`A` never holds `dA`'s frame); a history is cut to the delta's keys
        when an index allows."""
        lkeys, rkeys = [a for a, _ in self.pairs], [b for _, b in self.pairs]
        halves: list[tuple[list[Frame], list[Frame]]] = []
        if left.current is not None:
            right_all = self._history(right, left.current, lkeys)
            right_all += [right.current.frame] if right.current else []
            if right_all:
                halves.append(([left.current.frame], right_all))
        if right.current is not None:
            left_old = self._history(left, right.current, rkeys)
            if left_old:
                halves.append((left_old, [right.current.frame]))
        return halves

    def _history(self, side: Arranged, delta: Batch, by: list[str]) -> list[Frame]:
        """`side`'s history, only the rows with keys of `delta` (whose key columns are
        `by`) when the delta is small and the kernel picks them without a query."""
        if by and delta.rows is not None and delta.rows <= PROBE_ROWS:
            picked = side.history_with_keys(delta.frame, by)
            if picked is not None:
                return picked
        return side.history()

    def _in_driver(self, halves: list[tuple[list[Frame], list[Frame]]]) -> list[Frame] | None:
        """The delta rule's halves computed without a query (`Kernel.join_small`), or None
        when the kernel cannot do one of them so."""
        kernel, parts = self.kernel, []
        frames = [f for half in halves for side in half for f in side]
        if not kernel.takes(Capability.JOIN_SMALL, frames):
            return None
        shape = JoinShape(self.pairs, self.inputs[0].columns, self.right_values, self.depth)
        for lhs, rhs in halves:
            part = kernel.join_small(self._whole(lhs), self._whole(rhs), shape)
            if part is None:
                return None
            parts.append(part)
        return parts

    def _apart(self, history: list[Frame], delta: Frame) -> list[list[Frame]]:
        """`history` as one side of one join, or batch by batch where the kernel joins
        each batch with `delta` apart (`Kernel.join_apart`)."""
        if len(history) > 1 and self.kernel.join_apart(history, delta):
            return [[frame] for frame in history]
        return [history]

    def _keys_null_free(self, halves: list[tuple[list[Frame], list[Frame]]]) -> bool:
        """Whether no frame of either side holds a NULL key, as the kernel knows without
        an action (`Kernel.null_free`): then keys match by `=` (see there)."""
        if not self.pairs:
            return False
        lkeys, rkeys = [a for a, _ in self.pairs], [b for _, b in self.pairs]
        null_free = self.kernel.null_free
        return all(
            all(null_free(f, lkeys) for f in lhs) and all(null_free(f, rkeys) for f in rhs)
            for lhs, rhs in halves
        )

    def _whole(self, frames: list[Frame]) -> Frame:
        return self.kernel.union(frames) if len(frames) > 1 else frames[0]

    def _probe_query(self, null_safe: bool = True) -> exp.Query:
        """The join as a query over the batches `l` and `r`."""
        return rel.join_on_keys("l", "r", *self._shape, null_safe=null_safe)

    def _probe(
        self, frames: list[Frame], column: str | None, batch: Batch, by: str | None
    ) -> Frame:
        """The union of `frames`, filtered to the keys of a small `batch` when it is known."""
        whole = self.kernel.union(frames) if len(frames) > 1 else frames[0]
        if not self.kernel.probe_by_keys or column is None or by is None or batch.table is None:
            return whole
        condition = rel.key_filter(column, batch.table[by])
        if condition is None:
            return whole
        return self.kernel.query(rel.select("t", [exp.Star()], where=condition), {"t": whole})

    def describe(self) -> str:
        keys = ", ".join(f"{a} = {b}" for a, b in self.pairs)
        return f"Join[{self.kind}]({keys})"


def prepare_join(
    kernel: Kernel, shape: tuple[Any, Any, Any, Any, Any], null_safe: bool = True
) -> Prepared:
    """`relational.join_on_keys` of the batches `l` and `r` for a join's `shape` (its key
    pairs, left columns, right values, depth and kind), prepared once per shape."""
    return kernel.cached(
        ("join", *shape, null_safe),
        lambda: kernel.prepare(rel.join_on_keys("l", "r", *shape, null_safe=null_safe)),
    )


def static_join_schema(
    left: pa.Schema, right: pa.Schema, right_values: Sequence[str]
) -> pa.Schema | None:
    """The data schema of the join of `left` with the `right_values` columns of `right`,
    when it follows from the inputs alone: every column of both sides has a type every
    kernel passes through a projection unchanged (`linear.STABLE_TYPES`; the key types
    then compare, `check_key_types`). None otherwise (the kernel must evaluate the join).

    >>> static_join_schema(
    ...     pa.schema([("k", pa.int64()), ("a", pa.string())]),
    ...     pa.schema([("k", pa.int32()), ("b", pa.float64())]),
    ...     ["b"],
    ... ).names
    ['k', 'a', 'b']
    """
    if any(t not in STABLE_TYPES for t in (*left.types, *right.types)):
        return None
    fields = [pa.field(f.name, f.type) for f in left]
    fields += [pa.field(name, right.field(name).type) for name in right_values]
    return pa.schema(fields)


def check_key_types(
    left: pa.Schema, left_keys: Sequence[str], right: pa.Schema, right_keys: Sequence[str]
) -> None:
    """Refuse join keys whose types cannot be compared (numbers compare with numbers)."""
    for lk, rk in zip(left_keys, right_keys, strict=False):
        if lk not in left.names or rk not in right.names:
            continue  # unknown columns are reported by the arrangement
        lt, rt = left.field(lk).type, right.field(rk).type
        if lt != rt and not (_numeric(lt) and _numeric(rt)):
            raise SchemaError(
                f"join key {lk} ({lt}) and {rk} ({rt}) have different types",
                hint="cast one side with map(...) so the key types agree",
            )


def _numeric(t: object) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
