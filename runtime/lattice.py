"""Timestamps, their partial order and lattice operations, and frontiers.

A timestamp is a tuple of non-negative integers. The first coordinate is the
outer time (milliseconds since the Unix epoch, like Materialize's `mz_timestamp`);
each enclosing iteration adds one coordinate, the round counter. Timestamps of one
scope all have the same length (the scope's *depth*).

The order is the product partial order: `s <= t` iff every coordinate of `s` is
`<=` the matching coordinate of `t`. With it, timestamps form a lattice:

- `join(s, t)`: the least timestamp greater than or equal to both (coordinate-wise max);
- `meet(s, t)`: the greatest timestamp less than or equal to both (coordinate-wise min).

A *frontier* is an antichain: a set of mutually incomparable timestamps, read as
"every time greater than or equal to some element may still change". A time is
*complete* (will never change again) when no frontier element is `<=` it.

>>> join((3, 0), (1, 2))
(3, 2)
>>> less_equal((1, 2), (3, 0))
False
>>> f = Antichain([(5, 0), (0, 3)])
>>> f.less_equal((6, 1)), f.less_equal((2, 2))
(True, False)
>>> advance_by((2, 1), Antichain([(4, 0)]))
(4, 1)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

Time = tuple[int, ...]

#: The name of the time column for coordinate `i` of a batch (see `time_columns`).
TIME = "__time__"
#: The name of the multiplicity column of a batch.
DIFF = "__diff__"


def time_columns(depth: int) -> tuple[str, ...]:
    """The column names that hold a timestamp of `depth` coordinates.

    >>> time_columns(1), time_columns(3)
    (('__time__',), ('__time__', '__time1__', '__time2__'))
    """
    return (TIME,) + tuple(f"__time{i}__" for i in range(1, depth))


def less_equal(s: Time, t: Time) -> bool:
    """Whether `s <= t` in the product partial order."""
    return all(a <= b for a, b in zip(s, t, strict=True))


def bounded(upper: Time | None, bound: Time) -> bool:
    """Whether updates whose greatest time per coordinate is `upper` (None: not known;
    `()`: there are none) all lie at or below `bound` in `bound`'s coordinates.

    >>> bounded((3, 7), (3,)), bounded((3, 7), (2, 9)), bounded((), (1,)), bounded(None, (1,))
    (True, False, True, False)
    """
    return upper is not None and all(u <= b for u, b in zip(upper, bound, strict=False))


def less_than(s: Time, t: Time) -> bool:
    """Whether `s <= t` and `s != t`."""
    return s != t and less_equal(s, t)


def join(s: Time, t: Time) -> Time:
    """The least timestamp greater than or equal to both arguments."""
    return tuple(max(a, b) for a, b in zip(s, t, strict=True))


def meet(s: Time, t: Time) -> Time:
    """The greatest timestamp less than or equal to both arguments."""
    return tuple(min(a, b) for a, b in zip(s, t, strict=True))


def minimum(depth: int) -> Time:
    """The least timestamp of a scope of the given depth."""
    return (0,) * depth


@dataclass(frozen=True, slots=True)
class Antichain:
    """A set of mutually incomparable timestamps: a frontier.

    Invariant: no element is `<=` another. The constructor keeps only the
    minimal elements of what it is given. The empty antichain is the frontier of
    a closed input: every time is complete.
    """

    elements: tuple[Time, ...]

    def __init__(self, times: Iterable[Time] = ()) -> None:
        minimal: list[Time] = []
        for t in times:
            if any(less_equal(m, t) for m in minimal):
                continue
            minimal = [m for m in minimal if not less_equal(t, m)]
            minimal.append(tuple(t))
        object.__setattr__(self, "elements", tuple(sorted(minimal)))

    @classmethod
    def of(cls, *times: Time) -> Antichain:
        """The antichain of the minimal elements among `times`."""
        return cls(times)

    @classmethod
    def of_columns(cls, columns: Sequence[np.ndarray]) -> Antichain:
        """The antichain of the minimal elements among the times whose coordinates are
        the `columns` (one integer array per coordinate, a time per row), found with
        array operations for one or two coordinates, where the constructor compares the
        rows' times in Python (a loop's pending candidates are thousands of rows).

        >>> Antichain.of_columns([np.array([1, 0, 2, 0]), np.array([5, 7, 1, 6])]).elements
        ((0, 6), (1, 5), (2, 1))
        """
        if not len(columns) or not len(columns[0]):
            return cls()
        if len(columns) == 1:
            return cls([(int(columns[0].min()),)])
        if len(columns) > 2:
            return cls(zip(*(c.tolist() for c in columns), strict=True))
        first, second = columns
        order = np.lexsort((second, first))
        first, second = first[order], second[order]
        least = np.ones(len(first), bool)  # each first coordinate's least second
        np.not_equal(first[1:], first[:-1], out=least[1:])
        first, second = first[least], second[least]
        # Minimal: its second below every second of a lesser first coordinate.
        keep = np.ones(len(first), bool)
        np.less(second[1:], np.minimum.accumulate(second)[:-1], out=keep[1:])
        return cls(zip(first[keep].tolist(), second[keep].tolist(), strict=True))

    def __iter__(self) -> Iterator[Time]:
        return iter(self.elements)

    def __len__(self) -> int:
        return len(self.elements)

    def __bool__(self) -> bool:
        return bool(self.elements)

    def less_equal(self, t: Time) -> bool:
        """Whether some element is `<= t`, that is, whether `t` may still change."""
        return any(less_equal(e, t) for e in self.elements)

    def less_than(self, t: Time) -> bool:
        """Whether some element is strictly less than `t`."""
        return any(less_than(e, t) for e in self.elements)

    def complete(self, t: Time) -> bool:
        """Whether `t` is complete: no update at `t` can still arrive."""
        return not self.less_equal(t)

    def dominates(self, other: Antichain) -> bool:
        """Whether every element of `other` is `>=` some element of `self`."""
        return all(self.less_equal(t) for t in other.elements)

    def meet(self, other: Antichain) -> Antichain:
        """The frontier of times beyond either: the union's minimal elements."""
        return Antichain(self.elements + other.elements)

    @property
    def depth(self) -> int | None:
        """The number of coordinates of the elements (None when empty)."""
        return len(self.elements[0]) if self.elements else None


def advance_by(t: Time, frontier: Antichain) -> Time:
    """Advance `t` as far as `frontier` allows without changing any comparison.

    The result is the meet, over elements `f` of the frontier, of `join(t, f)`:
    for every time `s` beyond the frontier, `t <= s` iff `advance_by(t) <= s`.
    Compaction uses it: updates whose times advance to the same result can be
    consolidated without any reader beyond `frontier` seeing the difference.
    An empty frontier leaves `t` unchanged (nothing is complete-and-readable).
    """
    if not frontier:
        return t
    result: Time | None = None
    for f in frontier:
        candidate = join(t, f)
        result = candidate if result is None else meet(result, candidate)
    assert result is not None
    return result
