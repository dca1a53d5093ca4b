"""The optimizer's pieces, method by method, against step-by-step evaluation in DuckDB.

`JoinFunction`s are random chains of map, filter, project, generate_series and
negate over integer columns; `run` evaluates a chain one step at a time in
DuckDB on rows with a `__diff__` column, and the multiset (with diffs) after
consolidation is the function's meaning. Compose, optimize, permute and
demand must each preserve it. Constant folding is checked against DuckDB's
own evaluation of the unfolded expression, NULLs included.
"""

from __future__ import annotations

import gc
from collections import Counter

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from dsql.errors import SchemaError, UnsupportedError
from dsql.planner import expr as expr_module
from dsql.planner import types
from dsql.planner.expr import held_refs, parse_expr
from dsql.planner.linear import JoinFunction
from dsql.planner.linear_steps import FilterStep, MapStep, NegateStep, ProjectStep, Step, TableStep
from dsql.planner.passes.fold import fold
from dsql.planner.plan import Column

INT = Column("x", types.build("int"))
Rows = list[tuple[tuple[int | None, ...], int]]


def run(fn: JoinFunction, rows: Rows) -> Counter:
    """`fn` applied to `(row, diff)` pairs one step at a time in DuckDB; consolidated."""
    con = duckdb.connect()
    arity = fn.input_arity
    cols = [f"_c{i}" for i in range(arity)]
    con.execute(f"CREATE TABLE t0 ({', '.join([*(f'{c} INT' for c in cols), '__diff__ BIGINT'])})")
    if rows:
        con.executemany(
            f"INSERT INTO t0 VALUES ({', '.join('?' * (arity + 1))})", [(*r, d) for r, d in rows]
        )
    for k, step in enumerate(fn.steps):
        src, dst = f"t{k}", f"t{k + 1}"
        names = [f"_c{i}" for i in range(arity)]
        match step:
            case MapStep(exprs=exprs):
                new = [f"{e.sql('duckdb')} AS _c{arity + i}" for i, e in enumerate(exprs)]
                sql = f"SELECT {', '.join([*names, *new, '__diff__'])} FROM {src}"
            case FilterStep(predicates=preds):
                where = " AND ".join(f"({p.sql('duckdb')})" for p in preds)
                sql = f"SELECT * FROM {src} WHERE {where}"
            case ProjectStep(outputs=outs):
                picked = [f"_c{o} AS _c{i}" for i, o in enumerate(outs)]
                sql = f"SELECT {', '.join([*picked, '__diff__'])} FROM {src}"
            case TableStep(function=f):
                lo, hi = (f.args[k].sql("duckdb") for k in ("start", "end"))
                series = f"unnest(generate_series({lo}, {hi})) AS _c{arity}"
                sql = f"SELECT {', '.join([*names, series, '__diff__'])} FROM {src}"
            case NegateStep():
                sql = f"SELECT {', '.join([*names, '-__diff__ AS __diff__'])} FROM {src}"
        con.execute(f"CREATE TABLE {dst} AS {sql}")
        arity = _arity(fn, k + 1)
    out: Counter = Counter()
    for *row, diff in con.execute(f"SELECT * FROM t{len(fn.steps)}").fetchall():
        out[tuple(row)] += diff
    return Counter({r: d for r, d in out.items() if d})


def _arity(fn: JoinFunction, steps: int) -> int:
    return JoinFunction(fn.input_arity, fn.steps[:steps]).arity


def _expr(arity: int) -> st.SearchStrategy[exp.Expression]:
    c = st.integers(0, arity - 1).map(lambda i: f"_c{i}")
    k = st.integers(0, 3)
    text = st.one_of(
        st.builds(lambda a, n: f"{a} + {n}", c, k),
        st.builds(lambda a, b: f"{a} * {b}", c, c),
        st.builds(lambda a, n: f"COALESCE({a}, {n})", c, k),
        c,
    )
    return text.map(parse_expr)


def _pred(arity: int) -> st.SearchStrategy[exp.Expression]:
    c = st.integers(0, arity - 1).map(lambda i: f"_c{i}")
    text = st.one_of(
        st.builds(lambda a, n: f"{a} > {n}", c, st.integers(0, 3)),
        st.builds(lambda a: f"{a} IS NULL", c),
        st.builds(lambda a, b: f"{a} <= {b}", c, c),
        st.just("TRUE"),
    )
    return text.map(parse_expr)


@st.composite
def functions(draw: st.DrawFn, arity: int = 2, max_steps: int = 5) -> JoinFunction:
    steps: list[Step] = []
    current = arity
    for _ in range(draw(st.integers(0, max_steps))):
        kind = draw(st.sampled_from(["map", "filter", "project", "table", "negate"]))
        if current == 0 and kind != "negate":
            continue
        if kind == "map":
            exprs = tuple(draw(st.lists(_expr(current), min_size=1, max_size=2)))
            steps.append(MapStep(exprs, tuple(INT for _ in exprs)))
        elif kind == "filter":
            steps.append(FilterStep(tuple(draw(st.lists(_pred(current), min_size=1, max_size=2)))))
        elif kind == "project":
            outs = draw(st.lists(st.integers(0, current - 1), min_size=1, max_size=3))
            steps.append(ProjectStep(tuple(outs)))
        elif kind == "table":
            i = draw(st.integers(0, current - 1))
            steps.append(TableStep(parse_expr(f"generate_series(1, _c{i})"), (INT,)))
        else:
            steps.append(NegateStep())
        current = JoinFunction(arity, tuple(steps)).arity
    return JoinFunction(arity, tuple(steps))


values = st.one_of(st.none(), st.integers(-1, 3))
rows = st.lists(st.tuples(st.tuples(values, values), st.sampled_from([1, 2, -1])), max_size=6)
SETTINGS = settings(max_examples=60, deadline=None)


@SETTINGS
@given(functions(), rows)
def test_optimize_preserves_meaning(fn: JoinFunction, data: Rows) -> None:
    optimized = fn.optimize()
    assert run(optimized, data) == run(fn, data)
    assert optimized.optimize().describe() == optimized.describe(), "optimize is idempotent"


def test_memos_live_with_what_they_describe() -> None:
    """A function's segments and normal form, and an expression's held refs, are
    remembered while it lives and released with it (a table that held them kept dead
    plans alive)."""
    fn = JoinFunction(2, (MapStep((parse_expr("_c0 + _c1"),), (INT,)), ProjectStep((2, 0))))
    assert fn.segments() is fn.segments()
    normal = fn.optimize()
    assert normal.optimize() is normal
    assert normal == JoinFunction(normal.input_arity, normal.steps), "memos are not compared"

    e = parse_expr("_c0 + _c3")
    assert held_refs(e) == {0, 3} and held_refs(e) is held_refs(e)
    key = id(e)
    assert key in expr_module._HELD_REFS
    del e
    gc.collect()
    assert key not in expr_module._HELD_REFS


@SETTINGS
@given(functions(max_steps=3), st.data())
def test_compose_is_sequencing(f: JoinFunction, data: st.DataObject) -> None:
    g = data.draw(functions(arity=f.arity, max_steps=3)) if f.arity else JoinFunction(0)
    input_rows = data.draw(rows)
    assert run(f.compose(g), input_rows) == run(g, [(r, d) for r, d in _expand(run(f, input_rows))])


@SETTINGS
@given(functions(), rows)
def test_demand_is_what_the_output_reads(fn: JoinFunction, data: Rows) -> None:
    demanded = fn.demand()
    blanked = [(tuple(v if i in demanded else None for i, v in enumerate(r)), d) for r, d in data]
    assert run(fn, blanked) == run(fn, data)


@SETTINGS
@given(functions(), rows)
def test_permute_reads_the_moved_columns(fn: JoinFunction, data: Rows) -> None:
    # The input reversed, with one extra column in front.
    moved = fn.permute({0: 2, 1: 1}, 3)
    shuffled = [((7, r[1], r[0]), d) for r, d in data]
    assert run(moved, shuffled) == run(fn, data)


def test_permute_refuses_a_demanded_column_without_a_position() -> None:
    fn = JoinFunction.identity(2).filter([parse_expr("_c1 > 0")])
    with pytest.raises(SchemaError):
        fn.permute({0: 0}, 1)


def test_split_separates_temporal_bounds() -> None:
    fn = (
        JoinFunction.identity(2)
        .filter([parse_expr("mz_now() >= _c1 AND mz_now() < _c1 + 10 AND _c0 > 1")])
        .project([0])
    )
    safe, [interval] = fn.split(1)
    assert safe.describe() == ["filter #0 > 1", "project (#0)"]
    assert [e.sql() for e in interval.lower] == ["CAST(_c1 AS BIGINT)"]
    assert [e.sql() for e in interval.upper] == ["CAST(_c1 + 10 AS BIGINT)"]
    assert (interval.sign, interval.guard) == (1, ())


def test_split_of_an_or_is_inclusion_exclusion() -> None:
    fn = JoinFunction.identity(2).filter([parse_expr("mz_now() < _c1 OR _c0 > 1")])
    _, intervals = fn.split(1)
    shown = [(i.sign, [e.sql() for e in i.upper], [g.sql() for g in i.guard]) for i in intervals]
    assert shown == [
        (1, ["CAST(_c1 AS BIGINT)"], []),
        (1, [], ["_c0 > 1"]),
        (-1, ["CAST(_c1 AS BIGINT)"], ["_c0 > 1"]),
    ]


def test_split_of_a_bound_on_a_table_output_is_refused() -> None:
    fn = JoinFunction(1, (TableStep(parse_expr("generate_series(1, _c0)"), (INT,)),)).filter(
        [parse_expr("mz_now() < _c1")]
    )
    with pytest.raises(SchemaError):
        fn.split(1)
    with pytest.raises(UnsupportedError):
        JoinFunction.identity(1).filter([parse_expr("NOT mz_now() > _c0")]).split(1)


def test_optimize_hoists_predicates_and_negation() -> None:
    fn = JoinFunction(
        2,
        (
            NegateStep(),
            TableStep(parse_expr("generate_series(1, _c1)"), (INT,)),
            FilterStep((parse_expr("_c0 > 1"), parse_expr("_c2 > 1"))),
            ProjectStep((2,)),
        ),
    )
    assert fn.optimize().describe() == [
        "filter #0 > 1",
        "project (#1)",
        "table #1 = GENERATE_SERIES(1, #0)",
        "filter #1 > 1",
        "project (#1)",
        "negate",
    ]


def test_steps_are_checked() -> None:
    with pytest.raises(SchemaError):
        JoinFunction.identity(1).filter([parse_expr("_c3 > 1")])
    with pytest.raises(SchemaError):
        JoinFunction.identity(1).compose(JoinFunction.identity(2))


# --- constant folding -------------------------------------------------------------------
atoms = st.sampled_from(
    ["TRUE", "FALSE", "NULL", "x > 1", "y IS NULL", "1 = 1", "1 < NULL", "2 + 3 > 4"]
)


def _combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.builds(lambda a, b: f"({a} AND {b})", children, children),
        st.builds(lambda a, b: f"({a} OR {b})", children, children),
        st.builds(lambda a: f"(NOT {a})", children),
    )


@settings(max_examples=200, deadline=None)
@given(st.recursive(atoms, _combine, max_leaves=6))
def test_folding_keeps_three_valued_logic(text: str) -> None:
    e = parse_expr(text)
    folded = fold(e)
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT * FROM (VALUES (NULL, NULL), (0, 1), (2, NULL), (3, 4)) v(x, y)"
    )
    original = con.execute(f"SELECT {e.sql('duckdb')} FROM t ORDER BY x NULLS FIRST").fetchall()
    after = con.execute(f"SELECT {folded.sql('duckdb')} FROM t ORDER BY x NULLS FIRST").fetchall()
    assert after == original, (text, folded.sql())


def test_folding_leaves_overflow_and_columns_alone() -> None:
    assert fold(parse_expr("2147483647 + 1")).sql() == "2147483647 + 1"
    assert fold(parse_expr("_c0 = _c0")).sql() == "_c0 = _c0"
    assert fold(parse_expr("1 + 2 * 3")).sql() == "7"


def _expand(c: Counter) -> Rows:
    return [(r, d) for r, d in c.items()]


# --- join ordering ---------------------------------------------------------------------

TABLES = 5


@settings(max_examples=15, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, TABLES - 1), st.integers(0, TABLES - 1), st.sampled_from("ab")),
        min_size=1,
        max_size=6,
    ),
    st.permutations(range(TABLES)),
)
def test_join_order_keeps_many_way_joins_exact(links, from_order) -> None:  # noqa: ANN001
    """`FROM` lists joined by WHERE equalities in any order: reordered joins give DuckDB's
    rows, and when the equalities connect every table no join is a cross product."""
    import sqlglot

    import dsql
    from dsql.planner.decorrelate import decorrelate
    from dsql.planner.optimize import optimize
    from dsql.planner.plan import walk
    from dsql.planner.stateful import Join

    con, oracle = dsql.connect(kernel="local"), duckdb.connect()
    for c in (con, oracle):
        for t in range(TABLES):
            c.execute(f"CREATE TABLE t{t} (a int, b int)")
            c.execute(f"INSERT INTO t{t} VALUES (1, 2), (2, 3), (3, 1), ({t}, {t}), (NULL, 1)")
    where = " AND ".join(f"t{x}.a = t{y}.{col}" for x, y, col in links if x != y) or "TRUE"
    query = (
        f"SELECT {', '.join(f't{t}.a' for t in from_order)} "
        f"FROM {', '.join(f't{t}' for t in from_order)} WHERE {where}"
    )
    assert Counter(con.execute(query).fetchall()) == Counter(oracle.execute(query).fetchall())
    edges = {frozenset((x, y)) for x, y, _ in links if x != y}
    reach, frontier = {0}, [0]
    while frontier:
        n = frontier.pop()
        for e in edges:
            if n in e and not e <= reach:
                (m,) = e - {n}
                reach.add(m)
                frontier.append(m)
    if len(reach) == TABLES:
        bound = con.session.plan(sqlglot.parse_one(query, read="postgres"))
        plan = optimize(decorrelate(bound.plan))
        assert all(j.on is not None for j in walk(plan) if isinstance(j, Join))


def _greedy_by_definition(count: int, touches: list[set[int]]) -> list[int]:
    """Join order as join_order's docstring defines it, every conjunct scanned per step."""
    order, taken = [0], {0}
    while len(order) < count:
        connected = [n for t in touches if len(t) > 1 and len(t - taken) == 1 for n in t - taken]
        nxt = min(connected) if connected else min(set(range(count)) - taken)
        order.append(nxt)
        taken.add(nxt)
    return order


@given(
    st.integers(1, 12).flatmap(
        lambda n: st.tuples(
            st.just(n), st.lists(st.sets(st.integers(0, n - 1), max_size=3), max_size=16)
        )
    )
)
def test_join_order_takes_the_first_connected_input(case: tuple[int, list[set[int]]]) -> None:
    from dsql.planner.passes.join_order import _greedy

    count, touches = case
    assert _greedy(count, touches) == _greedy_by_definition(count, touches)
