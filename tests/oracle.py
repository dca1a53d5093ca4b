"""The runtime oracle: the dataflow operators evaluated from scratch on plain multisets.

A multiset is a `Counter` from row tuples to counts. Counts may be negative (a
collection is a Z-multiset) and a count of zero means "absent". Nothing here knows
about times or diffs: each function evaluates one operator, statically, on the
inputs accumulated at one time. DESIGN §2.1 defines the runtime as correct when,
at every time `t`,

    accumulate(output updates, t) == operator(accumulate(input updates, t))

and the property tests check exactly that, with the left side from the runtime and
the right side from this module. The code is deliberately naive (loops over rows,
no indexes) so that it is obviously right.

Invariant: every function returns a multiset with no zero counts, so results compare
with `==` without normalizing.

Rows are tuples, so columns are named by position: a join takes the key positions of
each side. Expressions are Python functions written to mean what the test's SQL
means (NULL is `None`).

>>> left = Counter({(1, "a"): 2, (None, "n"): 1})
>>> right = Counter({(1, "x"): 3, (None, "y"): 1})
>>> join(left, right, [0], [0]) == Counter({(1, "a", "x"): 6, (None, "n", "y"): 1})
True
>>> accumulate([((1,), 0, 1), ((1,), 2, 1), ((2,), 3, -1)], 2)
Counter({(1,): 2})
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

Row = tuple[Any, ...]
Multiset = Counter  # Counter[Row]
Update = tuple[Row, Any, int]  # (row, time, diff); a time is an int or a tuple of ints


def multiset(pairs: Iterable[tuple[Row, int]]) -> Multiset:
    """The multiset of `(row, count)` pairs, counts of equal rows summed, zeros dropped.

    >>> multiset([((1,), 2), ((1,), -2), ((3,), 1)])
    Counter({(3,): 1})
    """
    result: Multiset = Counter()
    for row, count in pairs:
        result[tuple(row)] += count
    return Counter({row: c for row, c in result.items() if c != 0})


def _time_le(s: Any, t: Any) -> bool:
    """`s <= t`: integers by value, tuples in the product partial order."""
    if isinstance(s, tuple):
        return all(a <= b for a, b in zip(s, t, strict=True))
    return s <= t


# --- updates -------------------------------------------------------------------------------


def accumulate(updates: Iterable[Update], t: Any) -> Multiset:
    """The multiset of rows with time `<= t` in a list of `(row, time, diff)` updates."""
    return multiset((row, diff) for row, time, diff in updates if _time_le(time, t))


def updates_from_arrow(table: Any) -> list[Update]:
    """The `(row, time, diff)` updates of a captured Arrow table.

    The table has the data columns, then `__time__` (and `__time1__`, ... inside
    iterations), then `__diff__`. The time is an int for one coordinate, a tuple
    otherwise; the row is the tuple of data columns in order.
    """
    names = table.column_names
    times = [n for n in names if n.startswith("__time") and n.endswith("__")]
    data = [n for n in names if n not in times and n != "__diff__"]
    columns = {n: table.column(n).to_pylist() for n in names}
    result: list[Update] = []
    for i in range(table.num_rows):
        row = tuple(columns[n][i] for n in data)
        stamp = tuple(columns[n][i] for n in times)
        result.append((row, stamp[0] if len(stamp) == 1 else stamp, columns["__diff__"][i]))
    return result


# --- linear operators ----------------------------------------------------------------------


def map(ms: Multiset, f: Callable[[Row], Row]) -> Multiset:
    """Each row replaced by `f(row)`; rows that map to the same row add up."""
    return multiset((f(row), c) for row, c in ms.items())


def filter(ms: Multiset, predicate: Callable[[Row], Any]) -> Multiset:
    """The rows for which `predicate` is true (`None`, SQL's NULL, counts as false)."""
    return multiset((row, c) for row, c in ms.items() if predicate(row) is True)


def negate(ms: Multiset) -> Multiset:
    """Every count negated."""
    return multiset((row, -c) for row, c in ms.items())


def concat(*parts: Multiset) -> Multiset:
    """The multiset sum."""
    return multiset((row, c) for ms in parts for row, c in ms.items())


def consolidate(ms: Multiset) -> Multiset:
    """The identity: consolidation changes how updates are written, not what they add up to."""
    return multiset(ms.items())


def flat_map(ms: Multiset, f: Callable[[Row], Iterable[Row]]) -> Multiset:
    """One row per element `f(row)` yields, each with the count of the row it came from."""
    return multiset((out, c) for row, c in ms.items() for out in f(row))


def explode(ms: Multiset, factor: Callable[[Row], int]) -> Multiset:
    """Each row with its count multiplied by `factor(row)` (zero or negative allowed)."""
    return multiset((row, c * factor(row)) for row, c in ms.items())


def join_function(
    ms: Multiset, logic: Callable[[Row], Iterable[tuple[Row, Any, int]]], t: Any
) -> Multiset:
    """The general linear operator, read at time `t`.

    `logic(row)` yields `(row2, t2, d2)`; the runtime emits `(row2, join(time, t2),
    diff * d2)` for an update `(row, time, diff)`. Read at `t`, an update with
    `time <= t` contributes exactly when `t2 <= t` (`None` for `t2` means no bound),
    so the result depends only on the accumulation at `t`: that is what this
    computes. A temporal filter (`t2 = lo` with `+1`, `t2 = hi` with `-1`) keeps a
    row exactly while `lo <= t < hi`.
    """
    return multiset(
        (out, c * d2)
        for row, c in ms.items()
        for out, t2, d2 in logic(row)
        if t2 is None or _time_le(t2, t)
    )


# --- joins ---------------------------------------------------------------------------------


def _key(row: Row, positions: Sequence[int]) -> Row:
    return tuple(row[i] for i in positions)


def join(
    left: Multiset, right: Multiset, left_keys: Sequence[int], right_keys: Sequence[int]
) -> Multiset:
    """Pairs of rows with equal keys: the left row, then the right row's non-key columns.

    Keys compare as data (`None == None`); counts multiply.
    """
    pairs = []
    for lrow, lc in left.items():
        for rrow, rc in right.items():
            if _key(lrow, left_keys) == _key(rrow, right_keys):
                rest = tuple(v for i, v in enumerate(rrow) if i not in right_keys)
                pairs.append((lrow + rest, lc * rc))
    return multiset(pairs)


def semijoin(
    left: Multiset, keys: Multiset, left_keys: Sequence[int], key_positions: Sequence[int]
) -> Multiset:
    """The left rows whose key occurs in `keys`, counts multiplied by that key's count.

    The key's count is the total count of the rows of `keys` with that key (the
    runtime projects `keys` to its key columns without removing duplicates, as the
    book's semijoin does).
    """
    counts = multiset((_key(row, key_positions), c) for row, c in keys.items())
    return multiset((row, c * counts[_key(row, left_keys)]) for row, c in left.items())


def antijoin(
    left: Multiset, keys: Multiset, left_keys: Sequence[int], key_positions: Sequence[int]
) -> Multiset:
    """The left rows whose key does not occur in `keys` (occurs: a positive total count)."""
    counts = multiset((_key(row, key_positions), c) for row, c in keys.items())
    return multiset((row, c) for row, c in left.items() if counts[_key(row, left_keys)] <= 0)


# --- reductions ----------------------------------------------------------------------------

#: An aggregate: `("count", None)` for count(*), or `("sum" | "min" | "max", position)`.
Aggregate = tuple[str, int | None]


def _aggregate(kind: str, position: int | None, group: list[tuple[Row, int]]) -> Any:
    if kind == "count":
        return sum(c for _, c in group)
    values = [(row[position], c) for row, c in group if row[position] is not None]
    if not values:
        return None  # SQL: sum/min/max over no non-NULL value is NULL
    if kind == "sum":
        return sum(v * c for v, c in values)
    if kind == "min":
        return min(v for v, _ in values)
    if kind == "max":
        return max(v for v, _ in values)
    raise ValueError(f"unknown aggregate {kind!r}")


def reduce(ms: Multiset, keys: Sequence[int], aggregates: Sequence[Aggregate]) -> Multiset:
    """Per key, one row: the key columns, then each aggregate over the key's group.

    A group is the rows of that key with non-zero count; an empty group yields no
    row (also with no keys: a global aggregate of nothing is absent, not a row of
    NULLs). A row with count `c` is `c` copies for count(*) and sum, and a
    candidate for min and max; for non-negative counts this is SQL's meaning.
    """
    groups: dict[Row, list[tuple[Row, int]]] = {}
    for row, c in ms.items():
        if c != 0:
            groups.setdefault(_key(row, keys), []).append((row, c))
    return multiset(
        (key + tuple(_aggregate(kind, pos, group) for kind, pos in aggregates), 1)
        for key, group in groups.items()
    )


def count(ms: Multiset) -> Multiset:
    """Each row with a non-zero count, extended by that count as a last column."""
    return multiset((row + (c,), 1) for row, c in ms.items() if c != 0)


def distinct(ms: Multiset) -> Multiset:
    """Each row with a positive count, once."""
    return multiset((row, 1) for row, c in ms.items() if c > 0)


def threshold(ms: Multiset, weight: Callable[[int], int]) -> Multiset:
    """Each row with count `weight(count)` (the book's `threshold`)."""
    return multiset((row, weight(c)) for row, c in ms.items() if c != 0)


# --- iteration -----------------------------------------------------------------------------


class LimitReached(Exception):
    """`iterate` with `on_limit="error"` did not converge within its limit."""


def iterate(
    initial: Multiset,
    body: Callable[[Multiset], Multiset],
    limit: int | None = None,
    on_limit: str = "error",
) -> Multiset:
    """The fixpoint of `body` from `initial`: `x0 = initial`, `x(i+1) = body(x(i))`.

    Returns the first `x(i)` with `body(x(i)) == x(i)`. With a `limit`, at most
    `limit` steps are taken: `on_limit="return"` returns `x(limit)`, `"error"`
    raises `LimitReached` when `x(limit)` is not a fixpoint. Mutual recursion is a
    body over a tuple of multisets packed into one (tag each row with its binding).

    >>> iterate(Counter({(1,): 1}), lambda x: multiset([((1,), 1), *(((r[0] + 1,), 1)
    ...     for r in x if r[0] < 3)]))
    Counter({(1,): 1, (2,): 1, (3,): 1})
    """
    x = multiset(initial.items())
    steps = 0
    while True:
        nxt = body(x)
        if nxt == x:
            return x
        if limit is not None and steps >= limit:
            if on_limit == "return":
                return x
            raise LimitReached(f"no fixpoint within {limit} steps")
        x, steps = nxt, steps + 1
