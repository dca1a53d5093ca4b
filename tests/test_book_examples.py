"""The differential dataflow book's examples, on both kernels.

- the skip-level `manages` join of chapter 1, with the "change its input" loop: the
  output updates must be exactly the book's listing, whether the changes arrive one
  flush per person or all in one flush (many times in one batch);
- friends-of-friends over one shared arrangement of `knows` (the arrangement chapter);
- `concat` and `consolidate`: a collection concatenated with its swapped self.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import oracle
from oracle import accumulate, updates_from_arrow

from dsql.runtime.arrangement import ArrangeNode
from dsql.runtime.dataflow import Worker
from dsql.runtime.kernel.base import Kernel
from dsql.runtime.operators.join import JoinNode

SIZE = 10

# The book's output for size 10: ((manager, (boss, person)), time, diff).
BOOK_LISTING = [
    ((0, (0, 0)), 0, 1),
    ((0, (0, 1)), 0, 1),
    ((0, (0, 2)), 2, 1),
    ((1, (0, 2)), 0, 1),
    ((1, (0, 2)), 2, -1),
    ((1, (0, 3)), 0, 1),
    ((1, (0, 4)), 4, 1),
    ((1, (0, 5)), 5, 1),
    ((2, (0, 4)), 2, 1),
    ((2, (0, 4)), 4, -1),
    ((2, (0, 5)), 2, 1),
    ((2, (0, 5)), 5, -1),
    ((2, (0, 6)), 6, 1),
    ((2, (0, 7)), 7, 1),
    ((2, (0, 8)), 8, 1),
    ((2, (1, 4)), 0, 1),
    ((2, (1, 4)), 2, -1),
    ((2, (1, 5)), 0, 1),
    ((2, (1, 5)), 2, -1),
    ((3, (1, 6)), 0, 1),
    ((3, (1, 6)), 6, -1),
    ((3, (1, 7)), 0, 1),
    ((3, (1, 7)), 7, -1),
    ((3, (1, 9)), 9, 1),
    ((4, (1, 8)), 4, 1),
    ((4, (1, 8)), 8, -1),
    ((4, (1, 9)), 4, 1),
    ((4, (1, 9)), 9, -1),
    ((4, (2, 8)), 0, 1),
    ((4, (2, 8)), 4, -1),
    ((4, (2, 9)), 0, 1),
    ((4, (2, 9)), 4, -1),
]


def _skip_level(kernel: Kernel) -> tuple[Any, Any, Worker]:
    """The book's dataflow: `manages` joined with itself to find skip-level managers."""
    worker = Worker(kernel)
    manages = worker.new_input({"m2": "int", "m1": "int"})
    c = manages.to_collection()
    skip = c.map("m1 AS k", "m2 AS boss").join(c.map("m2 AS k", "m1 AS person"), on=["k"])
    return manages, skip.capture(), worker


def _book_form(updates: list[tuple]) -> list[tuple]:
    """Updates consolidated per (row, time), written as the book prints them."""
    total: Counter = Counter()
    for (k, boss, person), time, diff in updates:
        total[((k, (boss, person)), time)] += diff
    return sorted((row, time, d) for (row, time), d in total.items() if d != 0)


def test_skip_level_one_flush_per_person(kernel: Kernel) -> None:
    manages, capture, worker = _skip_level(kernel)
    for person in range(SIZE):
        manages.insert((person // 2, person))
    got: list[tuple] = []
    for person in range(1, SIZE):
        manages.advance_to(person)
        manages.flush()
        worker.step()
        got += updates_from_arrow(capture.poll())
        # Everything before `person` is complete, and final.
        assert _book_form(got) == [u for u in BOOK_LISTING if u[1] < person]
        manages.remove((person // 2, person))
        manages.insert((person // 3, person))
    manages.advance_to(SIZE)
    manages.flush()
    worker.step()
    got += updates_from_arrow(capture.poll())
    assert _book_form(got) == BOOK_LISTING


def test_skip_level_all_changes_in_one_flush(kernel: Kernel) -> None:
    manages, capture, worker = _skip_level(kernel)
    for person in range(SIZE):
        manages.insert((person // 2, person))
    for person in range(1, SIZE):
        manages.advance_to(person)
        manages.remove((person // 2, person))
        manages.insert((person // 3, person))
    manages.advance_to(SIZE)
    manages.flush()
    assert worker.step()
    assert _book_form(updates_from_arrow(capture.poll())) == BOOK_LISTING
    assert not worker.step(), "one round did all the work"


def test_friends_of_friends_share_one_arrangement(kernel: Kernel) -> None:
    worker = Worker(kernel)
    knows_input = worker.new_input({"x": "int", "y": "int"})
    query_input = worker.new_input({"q": "int"})
    knows = knows_input.to_collection().arrange_by_key("x")
    queries = query_input.to_collection().map("q AS x", "q AS src")
    friends = queries.arrange_by_key("x").join_core(knows)
    fof = friends.map("y AS x", "src").arrange_by_key("x").join_core(knows).map("src", "y AS fof")
    capture = fof.capture()

    arrangements_of_knows = [
        n for n in worker.nodes if isinstance(n, ArrangeNode) and n.inputs[0] is knows_input.node
    ]
    assert arrangements_of_knows == [knows.node]
    joins = [n for n in worker.nodes if isinstance(n, JoinNode)]
    assert len(joins) == 2 and all(j.inputs[1] is knows.node for j in joins)

    rounds = [
        ([((0, 1), 1), ((1, 2), 1), ((1, 3), 1), ((2, 0), 1), ((3, 3), 2)], [((0,), 1)]),
        ([((1, 2), -1), ((2, 3), 1)], [((1,), 1), ((3,), 1)]),
        ([((0, 1), -1), ((0, 2), 1), ((3, 3), -2)], [((0,), -1)]),
    ]
    sent_knows: list[tuple] = []
    sent_query: list[tuple] = []
    got: list[tuple] = []
    for time, (knows_changes, query_changes) in enumerate(rounds):
        for session, changes, log in (
            (knows_input, knows_changes, sent_knows),
            (query_input, query_changes, sent_query),
        ):
            for row, diff in changes:
                session.update(row, diff)
                log.append((row, time, diff))
            session.advance_to(time + 1)
            session.flush()
        worker.step()
        got += updates_from_arrow(capture.poll())
        for t in range(time + 1):
            k, q = accumulate(sent_knows, t), accumulate(sent_query, t)
            step1 = oracle.join(oracle.map(q, lambda r: (r[0], r[0])), k, [0], [0])
            step2 = oracle.join(oracle.map(step1, lambda r: (r[2], r[1])), k, [0], [0])
            expected = oracle.map(step2, lambda r: (r[1], r[2]))
            assert accumulate(got, t) == expected, f"time {t}"
    assert accumulate(got, 0) == Counter({(0, 2): 1, (0, 3): 1})
    assert arrangements_of_knows == [
        n for n in worker.nodes if isinstance(n, ArrangeNode) and n.inputs[0] is knows_input.node
    ], "running did not create another arrangement of knows"


def test_concat_with_swapped_self_consolidates(kernel: Kernel) -> None:
    worker = Worker(kernel)
    manages = worker.new_input({"m2": "int", "m1": "int"})
    c = manages.to_collection()
    both = c.concat(c.map("m1 AS m2", "m2 AS m1"))
    raw: list[Any] = []
    consolidated: list[Any] = []
    both.inspect(lambda t: raw.extend(updates_from_arrow(t)))
    both.consolidate().inspect(lambda t: consolidated.extend(updates_from_arrow(t)))
    for person in range(4):
        manages.insert((person // 2, person))
    manages.advance_to(1)
    manages.flush()
    worker.step()
    # Before consolidation (0, 0) arrives twice, once from each side of the concat...
    assert sorted(u for u in raw if u[0] == (0, 0)) == [((0, 0), 0, 1), ((0, 0), 0, 1)]
    # ... after it, once with count 2; the other rows once each.
    assert sorted(consolidated) == sorted(
        [
            ((0, 0), 0, 2),
            ((0, 1), 0, 1),
            ((1, 0), 0, 1),
            ((1, 2), 0, 1),
            ((2, 1), 0, 1),
            ((1, 3), 0, 1),
            ((3, 1), 0, 1),
        ]
    )
