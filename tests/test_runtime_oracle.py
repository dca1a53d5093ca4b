"""Every runtime operator against the oracle, at every time of random histories.

DESIGN §2.1: at every time `t`, accumulate(output up to `t`) must equal the query
evaluated from scratch on accumulate(inputs up to `t`). Each test builds a small
dataflow, feeds it a history round by round (inserts, deletes, heavy
multiplicities, several times per flush, updates at future times, rounds that only
advance the frontier), and after every round checks, for every complete time, the
captured output against `oracle` evaluated on the accumulated inputs.

The hypothesis tests run on the in-process kernel (fast); the example tests run one
fixed short history per operator family on both kernels (the `kernel` fixture), since
results must not depend on placement (DESIGN §3.1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hypothesis
import oracle
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import Multiset, accumulate, multiset, updates_from_arrow
from sqlglot import exp

from dsql.runtime.collection import Collection, LinearNode
from dsql.runtime.dataflow import Worker
from dsql.runtime.input import InputNode
from dsql.runtime.kernel.base import Kernel
from dsql.runtime.kernel.local import LocalKernel

LOCAL = settings(
    deadline=None,
    max_examples=30,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- histories -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One change to an input: `diff` copies of `row` at `time`."""

    row: tuple[Any, ...]
    time: int
    diff: int


@dataclass(frozen=True)
class Step:
    """What one input does in one round: its changes, then `advance_to(advance)` and flush."""

    ops: tuple[Op, ...]
    advance: int


@dataclass(frozen=True)
class History:
    """Rounds; each round holds one `Step` per input."""

    rounds: tuple[tuple[Step, ...], ...]

    def times(self) -> list[int]:
        return [op.time for rnd in self.rounds for s in rnd for op in s.ops] + [
            s.advance for rnd in self.rounds for s in rnd
        ]


def example(*rounds: tuple[tuple[list[tuple[tuple, int, int]], int], ...]) -> History:
    """A history written as rounds of `([(row, time, diff), ...], advance)` per input."""
    return History(
        tuple(
            tuple(Step(tuple(Op(tuple(r), t, d) for r, t, d in ops), adv) for ops, adv in rnd)
            for rnd in rounds
        )
    )


MULTIPLICITY = st.sampled_from([1, 1, 1, 2, 3, 7, 40])


@st.composite
def _input_steps(
    draw: Any, rows: st.SearchStrategy, rounds: int, nonnegative: bool, max_ops: int
) -> list[Step]:
    """One input's steps. With `nonnegative`, a delete takes back copies of an earlier
    insert, at or after that insert's time, so every accumulation stays >= 0."""
    now = 0
    live: list[list[Any]] = []  # [row, time, copies not yet deleted]
    steps = []
    for _ in range(rounds):
        ops = []
        for _ in range(draw(st.integers(0, max_ops))):
            at = now + draw(st.integers(0, 3))  # several times per flush, some in the future
            if draw(st.integers(0, 2)) == 0:  # a delete
                if nonnegative:
                    if not live:
                        continue
                    entry = live[draw(st.integers(0, len(live) - 1))]
                    n = draw(st.integers(1, entry[2]))
                    entry[2] -= n
                    if entry[2] == 0:
                        live.remove(entry)
                    ops.append(Op(entry[0], max(at, entry[1]), -n))
                else:
                    ops.append(Op(draw(rows), at, -draw(MULTIPLICITY)))
            else:
                row, n = draw(rows), draw(MULTIPLICITY)
                live.append([row, at, n])
                ops.append(Op(row, at, n))
        now += draw(st.integers(0, 3))  # 0: the frontier stays; ops may be empty too
        steps.append(Step(tuple(ops), now))
    return steps


@st.composite
def histories(
    draw: Any,
    rows: tuple[st.SearchStrategy, ...],
    nonnegative: bool = False,
    max_rounds: int = 5,
    max_ops: int = 6,
) -> History:
    """Random histories for inputs whose rows are drawn from `rows` (one per input)."""
    n = draw(st.integers(1, max_rounds))
    per_input = [draw(_input_steps(r, n, nonnegative, max_ops)) for r in rows]
    return History(tuple(zip(*per_input, strict=True)))


# --- the check -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pipeline:
    """A dataflow under test and its from-scratch meaning.

    `build(*inputs)` returns named output collections; `expected(inputs, t)` returns,
    for the multisets of the inputs accumulated at `t`, the expected multiset of each
    output. `horizon` is a time the final frontier must pass (for data-given times).
    """

    schemas: tuple[dict[str, str], ...]
    build: Callable[..., dict[str, Collection]]
    expected: Callable[[list[Multiset], int], dict[str, Multiset]]
    rows: tuple[st.SearchStrategy, ...]
    nonnegative: bool = False
    horizon: int = 0


def _apply(session: Any, op: Op) -> None:
    if op.time == session.time and op.diff == 1:
        session.insert(op.row)
    elif op.time == session.time and op.diff == -1:
        session.remove(op.row)
    elif op.time == session.time:
        session.update(op.row, op.diff)
    else:
        session.update_at(op.row, op.time, op.diff)


def _describe(want: Multiset, have: Multiset) -> str:
    missing = multiset([*want.items(), *((r, -c) for r, c in have.items())])
    return (
        f"expected {dict(want)}\n     got {dict(have)}\n"
        f" missing (got + this = expected): {dict(missing)}"
    )


def check_history(kernel: Kernel, pipeline: Pipeline, history: History) -> dict[str, list]:
    """Run `history` through the pipeline, checking every complete time after every round.

    Returns the captured updates per output.
    """
    worker = Worker(kernel)
    sessions = [worker.new_input(s) for s in pipeline.schemas]
    outputs = pipeline.build(*(s.to_collection() for s in sessions))
    captures = {name: c.capture() for name, c in outputs.items()}
    sent: list[list[tuple]] = [[] for _ in sessions]
    got: dict[str, list] = {name: [] for name in outputs}

    def verify(frontier: int, label: str) -> None:
        for name in outputs:
            late = [u for u in got[name] if u[1] >= frontier]
            assert not late, f"{label}: {name} released updates at incomplete times: {late}"
        for t in range(frontier):
            want = pipeline.expected([accumulate(s, t) for s in sent], t)
            for name in outputs:
                have = accumulate(got[name], t)
                assert have == want[name], f"{label}, output {name!r} at time {t}:\n" + _describe(
                    want[name], have
                )

    def run_round(label: str) -> None:
        worker.step()
        for name, capture in captures.items():
            got[name].extend(updates_from_arrow(capture.poll()))
        (frontier,) = worker.frontier.elements[0]
        verify(frontier, label)

    for number, rnd in enumerate(history.rounds):
        for session, step, log in zip(sessions, rnd, sent, strict=True):
            for op in step.ops:
                _apply(session, op)
                log.append((op.row, op.time, op.diff))
            session.advance_to(step.advance)
            session.flush()
        run_round(f"after round {number}")
    final = max([*history.times(), pipeline.horizon]) + 2
    for session in sessions:
        session.advance_to(final)
        session.flush()
    run_round(f"after the final advance to {final}")
    return got


# --- row domains: small, so that joins and groups collide --------------------------------

KEY = st.integers(0, 3)
NULLABLE_KEY = st.integers(-1, 3).map(lambda k: None if k < 0 else k)
VALUE = st.integers(0, 5)
NULLABLE_VALUE = st.integers(-1, 5).map(lambda v: None if v < 0 else v)
KV = {"k": "int", "v": "int"}


def _null(f: Callable[..., Any]) -> Callable[..., Any]:
    """SQL's NULL propagation for a scalar function: NULL in, NULL out."""
    return lambda *args: None if any(a is None for a in args) else f(*args)


_add = _null(lambda a, b: a + b)
_sub = _null(lambda a, b: a - b)
_mul = _null(lambda a, b: a * b)


# --- pipelines -----------------------------------------------------------------------------


def _map_filter(a: Collection) -> dict[str, Collection]:
    chain = (
        a.map("k", "v", "k + v AS s", "v * 2 AS d")
        .filter("s % 2 = 0")
        .map("k", "s", "d - k AS e")
        .filter("e >= 2 OR k IS NULL")
    )
    return {"out": chain}


def _map_filter_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    (a,) = inputs
    m = oracle.map(a, lambda r: (r[0], r[1], _add(r[0], r[1]), _mul(r[1], 2)))
    m = oracle.filter(m, lambda r: None if r[2] is None else r[2] % 2 == 0)
    m = oracle.map(m, lambda r: (r[0], r[2], _sub(r[3], r[0])))
    m = oracle.filter(m, lambda r: (r[2] is not None and r[2] >= 2) or r[0] is None)
    return {"out": m}


MAP_FILTER = Pipeline((KV,), _map_filter, _map_filter_expected, (st.tuples(NULLABLE_KEY, VALUE),))


def _negate_concat(a: Collection, b: Collection) -> dict[str, Collection]:
    swapped = a.map("v AS k", "k AS v")
    return {
        "difference": a.concat(b.negate()),
        "with_swapped": a.concat(swapped, b.negate().negate()).consolidate(),
    }


def _negate_concat_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    a, b = inputs
    swapped = oracle.map(a, lambda r: (r[1], r[0]))
    return {
        "difference": oracle.concat(a, oracle.negate(b)),
        "with_swapped": oracle.consolidate(
            oracle.concat(a, swapped, oracle.negate(oracle.negate(b)))
        ),
    }


NEGATE_CONCAT = Pipeline(
    (KV, KV),
    _negate_concat,
    _negate_concat_expected,
    (st.tuples(KEY, VALUE), st.tuples(KEY, VALUE)),
)


def _join(a: Collection, b: Collection) -> dict[str, Collection]:
    return {
        "on_k": a.join(b, on=[("k", "j")]),
        "on_both": a.join(b.map("j AS k", "w AS v"), on=["k", "v"]),
    }


def _join_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    a, b = inputs
    return {"on_k": oracle.join(a, b, [0], [0]), "on_both": oracle.join(a, b, [0, 1], [0, 1])}


JW = {"j": "int", "w": "int"}
JOIN = Pipeline(
    (KV, JW),
    _join,
    _join_expected,
    (st.tuples(NULLABLE_KEY, VALUE), st.tuples(NULLABLE_KEY, VALUE)),
)


def _semi_anti(a: Collection, b: Collection) -> dict[str, Collection]:
    return {"semi": a.semijoin(b, on=[("k", "j")]), "anti": a.antijoin(b, on=[("k", "j")])}


def _semi_anti_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    a, b = inputs
    return {
        "semi": oracle.semijoin(a, b, [0], [0]),
        "anti": oracle.antijoin(a, b, [0], [0]),
    }


SEMI_ANTI = Pipeline(
    (KV, JW),
    _semi_anti,
    _semi_anti_expected,
    (st.tuples(NULLABLE_KEY, VALUE), st.tuples(NULLABLE_KEY, VALUE)),
)

AGGREGATES = ["count(*) AS n", "sum(v) AS s", "min(v) AS lo", "max(v) AS hi"]


def _reduce(a: Collection) -> dict[str, Collection]:
    return {
        "by_key": a.reduce(["k"], aggregates=AGGREGATES),
        "global": a.reduce([], aggregates=["count(*) AS n", "max(v) AS hi"]),
    }


def _reduce_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    (a,) = inputs
    return {
        "by_key": oracle.reduce(a, [0], [("count", None), ("sum", 1), ("min", 1), ("max", 1)]),
        "global": oracle.reduce(a, [], [("count", None), ("max", 1)]),
    }


REDUCE = Pipeline(
    (KV,), _reduce, _reduce_expected, (st.tuples(NULLABLE_KEY, NULLABLE_VALUE),), nonnegative=True
)

COUNT = Pipeline(
    (KV,),
    lambda a: {"count": a.count()},
    lambda inputs, t: {"count": oracle.count(inputs[0])},
    (st.tuples(KEY, VALUE),),
)
DISTINCT = Pipeline(
    (KV,),
    lambda a: {"distinct": a.distinct()},
    lambda inputs, t: {"distinct": oracle.distinct(inputs[0])},
    (st.tuples(NULLABLE_KEY, VALUE),),
)

WEIGHT = "CASE WHEN __count__ >= 2 THEN __count__ - 1 WHEN __count__ < 0 THEN -1 ELSE 0 END"


def _weight(c: int) -> int:
    return c - 1 if c >= 2 else (-1 if c < 0 else 0)


THRESHOLD = Pipeline(
    (KV,),
    lambda a: {"threshold": a.threshold(WEIGHT)},
    lambda inputs, t: {"threshold": oracle.threshold(inputs[0], _weight)},
    (st.tuples(KEY, VALUE),),
)


def _flat_map(a: Collection) -> dict[str, Collection]:
    return {
        "elements": a.flat_map("ARRAY[k, v, k + v]", "x", keep=["k"]),
        "some_empty": a.flat_map(
            "CASE WHEN v > 2 THEN ARRAY[v, k] ELSE ARRAY[]::bigint[] END", "x", keep=["k"]
        ),
        "exploded": a.explode("v - 2"),
        "chain": a.filter("v <> 3").flat_map("ARRAY[v, v]", "x", keep=["k"]).explode("k - 1"),
    }


def _flat_map_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    (a,) = inputs
    chain = oracle.filter(a, lambda r: r[1] != 3)
    chain = oracle.flat_map(chain, lambda r: [(r[0], r[1]), (r[0], r[1])])
    return {
        "elements": oracle.flat_map(a, lambda r: [(r[0], r[0]), (r[0], r[1]), (r[0], r[0] + r[1])]),
        "some_empty": oracle.flat_map(
            a, lambda r: [(r[0], r[1]), (r[0], r[0])] if r[1] > 2 else []
        ),
        "exploded": oracle.explode(a, lambda r: r[1] - 2),
        "chain": oracle.explode(chain, lambda r: r[0] - 1),
    }


FLAT_MAP = Pipeline((KV,), _flat_map, _flat_map_expected, (st.tuples(KEY, VALUE),))

# A temporal filter as the general linear operator: present from max(t, lo) until hi.
TEMPORAL_BRANCHES = [
    {"columns": ["k", "lo", "hi"], "time": "lo", "diff": "1"},
    {"columns": ["k", "lo", "hi"], "time": "hi", "diff": "-1"},
]
LOHI = 12


def _temporal(a: Collection) -> dict[str, Collection]:
    present = a.join_function(TEMPORAL_BRANCHES)
    return {"present": present, "per_key": present.reduce(["k"], aggregates=["count(*) AS n"])}


def _temporal_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    (a,) = inputs
    present = oracle.join_function(a, lambda r: [(r, r[1], 1), (r, r[2], -1)], t)
    return {"present": present, "per_key": oracle.reduce(present, [0], [("count", None)])}


TEMPORAL = Pipeline(
    ({"k": "int", "lo": "int", "hi": "int"},),
    _temporal,
    _temporal_expected,
    (st.tuples(KEY, st.integers(0, LOHI), st.integers(0, LOHI)),),
    nonnegative=True,
    horizon=LOHI,
)

# --- hypothesis: every pipeline, random histories, in-process kernel ----------------------


def _property(name: str, pipeline: Pipeline, max_examples: int = 30) -> Callable[..., None]:
    """A hypothesis test (named `name`) of `pipeline` on random histories."""

    def test(history: History) -> None:
        check_history(LocalKernel(), pipeline, history)

    test.__name__ = test.__qualname__ = name
    strategy = histories(pipeline.rows, nonnegative=pipeline.nonnegative)
    return settings(LOCAL, max_examples=max_examples)(given(history=strategy)(test))


test_map_filter_chain = _property("test_map_filter_chain", MAP_FILTER, 40)
test_negate_concat = _property("test_negate_concat", NEGATE_CONCAT)
test_join = _property("test_join", JOIN)
test_semijoin_antijoin = _property("test_semijoin_antijoin", SEMI_ANTI)
test_reduce_aggregates = _property("test_reduce_aggregates", REDUCE)
test_count = _property("test_count", COUNT)
test_distinct = _property("test_distinct", DISTINCT)
test_threshold = _property("test_threshold", THRESHOLD)
test_flat_map_explode = _property("test_flat_map_explode", FLAT_MAP)
test_temporal_join_function = _property("test_temporal_join_function", TEMPORAL)


@settings(LOCAL, max_examples=25)
@given(history=histories((st.tuples(NULLABLE_KEY, VALUE),), nonnegative=True))
def test_reduce_after_join_of_an_input_with_itself(history: History) -> None:
    """Join feeding reduce: interesting times from both join inputs reach the reduce."""

    def build(a: Collection) -> dict[str, Collection]:
        pairs = a.join(a.map("k", "v AS w"), on=["k"])
        return {"out": pairs.reduce(["k"], aggregates=["count(*) AS n", "max(w) AS m"])}

    def expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
        (a,) = inputs
        pairs = oracle.join(a, a, [0], [0])
        return {"out": oracle.reduce(pairs, [0], [("count", None), ("max", 2)])}

    pipeline = Pipeline((KV,), build, expected, ())
    check_history(LocalKernel(), pipeline, history)


# A join's delta on Spark once probed a driver batch's key index, which takes driver rows.
_SPARK_DELTA = example(
    (([], 0), ([], 0)),
    (([((0, 0), 0, 1)], 0), ([], 0)),
    (([], 0), ([((0, 0), 0, 1), ((0, 1), 0, 1), ((0, 0), 1, -1)], 0)),
)


@settings(LOCAL, max_examples=3)  # each round runs Spark jobs: a few histories
@given(history=histories((st.tuples(KEY, VALUE),) * 2, True, max_rounds=4, max_ops=8))
@hypothesis.example(history=_SPARK_DELTA)
def test_join_and_reduce_over_batches_consolidated_as_spark_stores_them(
    spark: Any, history: History
) -> None:
    """Under a placement threshold of 2 rows an arrangement's batches of integers move to
    Spark consolidated bucket by bucket as they are written (`store_consolidated`), and
    its merges group by the data columns where every time advances to the frontier."""
    from dsql.runtime.kernel.auto import AutoKernel

    kernel = AutoKernel(2, spark, notice=None)

    def build(a: Collection, b: Collection) -> dict[str, Collection]:
        joined = a.join(b, on=[("k", "j")])
        return {**_join(a, b), "sums": joined.reduce(["k"], aggregates=["sum(w) AS s"])}

    def expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
        joined = oracle.join(*inputs, [0], [0])
        return {**_join_expected(inputs, t), "sums": oracle.reduce(joined, [0], [("sum", 2)])}

    check_history(kernel, Pipeline((KV, JW), build, expected, ()), history)


# --- examples on both kernels: one short fixed history per operator family ----------------

# Round 1: several times in one flush, a future update, heavy multiplicity, a NULL key.
# Round 2: deletes (of most of the heavy row, of a future row after it appears), more
# future times. (`check_history` ends with a round that only moves the frontier.)
ONE_INPUT = example(
    (([((0, 1), 0, 1), ((1, 2), 0, 40), ((None, 4), 0, 1), ((1, 3), 1, 2), ((2, 5), 4, 1)], 2),),
    (([((1, 2), 2, -39), ((0, 1), 2, 1), ((3, 0), 3, 3), ((2, 5), 5, -1), ((0, 4), 2, 1)], 3),),
)
TWO_INPUTS = example(
    (
        ([((0, 1), 0, 1), ((1, 2), 0, 3), ((None, 4), 0, 1), ((1, 3), 1, 1)], 1),
        ([((1, 5), 0, 2), ((None, 0), 0, 1), ((2, 2), 3, 1)], 2),
    ),
    (
        ([((1, 2), 1, -3), ((2, 2), 2, 1), ((0, 1), 4, -1)], 3),
        ([((0, 1), 2, 1), ((1, 5), 2, -2), ((1, 0), 3, 1)], 3),
    ),
)
TEMPORAL_INPUT = example(
    (([((0, 2, 5), 0, 1), ((1, 0, 3), 0, 2), ((1, 4, 2), 1, 1), ((2, 1, 9), 3, 1)], 2),),
    (([((1, 0, 3), 2, -1), ((3, 3, 4), 4, 1)], 4),),
)


def test_map_filter_negate_concat_on_kernel(kernel: Kernel) -> None:
    def build(a: Collection, b: Collection) -> dict[str, Collection]:
        outputs = {**_map_filter(a), **_negate_concat(a, b)}
        chain = outputs["out"].node
        assert isinstance(chain, LinearNode) and len(chain.linear.steps) == 4
        assert isinstance(chain.inputs[0], InputNode), "the map/filter chain is one fused operator"
        return outputs

    def expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
        return {**_map_filter_expected(inputs[:1], t), **_negate_concat_expected(inputs, t)}

    check_history(kernel, Pipeline((KV, KV), build, expected, ()), TWO_INPUTS)


def test_joins_on_kernel(kernel: Kernel) -> None:
    def build(a: Collection, b: Collection) -> dict[str, Collection]:
        return {**_join(a, b), **_semi_anti(a, b)}

    def expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
        return {**_join_expected(inputs, t), **_semi_anti_expected(inputs, t)}

    check_history(kernel, Pipeline((KV, JW), build, expected, ()), TWO_INPUTS)


def test_reduce_on_kernel(kernel: Kernel) -> None:
    got = check_history(kernel, REDUCE, ONE_INPUT)
    assert got["by_key"], "the reduce produced output"


def test_count_distinct_threshold_on_kernel(kernel: Kernel) -> None:
    def build(a: Collection) -> dict[str, Collection]:
        return {**COUNT.build(a), **DISTINCT.build(a), **THRESHOLD.build(a)}

    def expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
        return {
            **COUNT.expected(inputs, t),
            **DISTINCT.expected(inputs, t),
            **THRESHOLD.expected(inputs, t),
        }

    check_history(kernel, Pipeline((KV,), build, expected, ()), ONE_INPUT)


def test_flat_map_explode_on_kernel(kernel: Kernel) -> None:
    history = History(
        tuple(
            tuple(Step(tuple(o for o in s.ops if o.row[0] is not None), s.advance) for s in rnd)
            for rnd in ONE_INPUT.rounds
        )
    )
    check_history(kernel, FLAT_MAP, history)


def test_temporal_join_function_on_kernel(kernel: Kernel) -> None:
    check_history(kernel, TEMPORAL, TEMPORAL_INPUT)


def test_capture_holds_future_updates_while_traces_compact(kernel: Kernel) -> None:
    """A capture keeps an update at a future time while later batches arrive from a
    compacted trace (whose engine schema may differ, e.g. in nullability)."""
    one = {"k": "int"}
    pipeline = Pipeline(
        (one, one),
        lambda a, b: {"join": a.join(b, on=["k"])},
        lambda inputs, t: {"join": oracle.join(inputs[0], inputs[1], [0], [0])},
        (),
    )
    history = example(
        (([((1,), 0, 1)], 1), ([((1,), 9, 1)], 1)),  # the capture holds (1)@9
        (([((2,), 1, 1)], 2), ([], 2)),  # a's trace merges its two batches, compacting
        (([], 3), ([((2,), 2, 1)], 3)),  # (2)@2 comes from the join with a's merged batch
    )
    check_history(kernel, pipeline, history)


# --- generate_series as a flat_map (DESIGN §2.6) --------------------------------------------

SERIES_INPUT = example((([((1, 3), 0, 1), ((2, 0), 0, 1), ((3, -1), 1, 2), ((4, 1), 0, 1)], 2),))


def _series_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    (a,) = inputs
    return {"series": oracle.flat_map(a, lambda r: [(r[0], i) for i in range(1, r[1] + 1)])}


def test_flat_map_generate_series_text(kernel: Kernel) -> None:
    """`flat_map("generate_series(1, n)")`, as a user writes it (PostgreSQL dialect)."""
    pipeline = Pipeline(
        ({"k": "int", "n": "int"},),
        lambda a: {"series": a.flat_map("generate_series(1, n)", "i", keep=["k"])},
        _series_expected,
        (),
    )
    check_history(kernel, pipeline, SERIES_INPUT)


def test_flat_map_generate_series_empty_ranges(kernel: Kernel) -> None:
    """generate_series(1, n) is empty for n < 1 on every kernel (PostgreSQL, DuckDB)."""
    series = exp.GenerateSeries(start=exp.Literal.number(1), end=exp.column("n"))
    pipeline = Pipeline(
        ({"k": "int", "n": "int"},),
        lambda a: {"series": a.flat_map(series, "i", keep=["k"])},
        _series_expected,
        (),
    )
    check_history(kernel, pipeline, SERIES_INPUT)


def test_reduce_output_types_agree_across_kernels(spark: Any) -> None:
    """The same reduce has the same output schema on both kernels (placement is invisible)."""
    from dsql.runtime.kernel.spark import SparkKernel

    def schema(kernel: Kernel) -> pa.Schema:
        worker = Worker(kernel)
        source = worker.new_input(KV).to_collection()
        return source.reduce(["k"], aggregates=AGGREGATES).schema

    assert schema(LocalKernel()) == schema(SparkKernel(spark))


def test_joins_on_bucketed_spark_batches(spark) -> None:  # noqa: ANN001
    # Every batch of more than one row stored as a bucketed table: with NULL keys the
    # join stays NULL-safe; without, keys match by `=` and a delta joins each batch of
    # the other side's history apart (`Kernel.join_apart`).
    from dsql.runtime.kernel.spark import SparkKernel

    def build(a: Collection, b: Collection) -> dict[str, Collection]:
        return {**_join(a, b), **_semi_anti(a, b)}

    def expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
        return {**_join_expected(inputs, t), **_semi_anti_expected(inputs, t)}

    no_nulls = History(
        tuple(
            tuple(Step(tuple(o for o in s.ops if o.row[0] is not None), s.advance) for s in rnd)
            for rnd in TWO_INPUTS.rounds
        )
    )
    for history in (TWO_INPUTS, no_nulls):
        kernel = SparkKernel(spark, small_rows=1)
        apart: list[bool] = []

        def spy(history, delta, seen=apart, ask=kernel.join_apart) -> bool:  # noqa: ANN001
            seen.append(ask(history, delta))
            return seen[-1]

        kernel.join_apart = spy  # type: ignore[method-assign]
        check_history(kernel, Pipeline((KV, JW), build, expected, ()), history)
        assert kernel.buckets and kernel._tables, "batches were stored as bucketed tables"  # noqa: SLF001
        assert any(apart), "a delta joined a history of bucketed batches apart"
