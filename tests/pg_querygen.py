"""Random SQL queries over small mixed-type tables, for comparing dsql with PostgreSQL.

`TABLES` are three small tables whose columns mix int, bigint, numeric, float, text,
bool, date and timestamp; `SEED` fills them with NULLs, duplicates, negative numbers and
empty strings. `query(choose)` writes one random SELECT over them: joins of every kind
(inner, outer, USING, NATURAL, non-equi ON, cross, self, LATERAL), subqueries (scalar,
IN/NOT IN, EXISTS, ANY/ALL, correlated one and two levels out), GROUP BY with HAVING,
DISTINCT, set operations, ORDER BY with NULLS FIRST/LAST and LIMIT/OFFSET, CASE,
COALESCE, NULLIF, casts, string functions and mixed-type comparisons. Every choice goes
through `choose`, a `Chooser`: `HypothesisChooser` draws from a hypothesis `data` object
(so failures shrink), `RandomChooser` from a seeded `random.Random` (for long hunts).

A query's ORDER BY, when it has one, lists every output column, so the order (and the
rows LIMIT keeps) is total and the comparison can be ordered: `Query.ordered`.

>>> q = query(RandomChooser(3))
>>> q.sql.startswith(("SELECT", "(", "WITH"))
True
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

TABLES = {
    "t1": "a int, b bigint, n numeric(8,2), f float8, s text, p bool, d date",
    "t2": "a int, c int, s text, n numeric(8,2), ts timestamp",
    "t3": "k int, v int, w text",
}

SEED = (
    "INSERT INTO t1 VALUES (1, 10, 1.50, 0.5, 'a', true, '2024-01-01'), "
    "(1, 10, 1.50, 0.5, 'a', true, '2024-01-01'), (2, NULL, -2.25, -1.5, '', false, NULL), "
    "(NULL, -7, 0, NULL, 'B', NULL, '2023-12-31'), (-3, 3000000000, NULL, 2, NULL, true, "
    "'2024-02-29'), (0, 0, 3, 0, 'ab', false, '2024-01-02')",
    "INSERT INTO t2 VALUES (1, 5, 'a', 1.50, '2024-01-01 10:00'), (2, NULL, 'B', 3, NULL), "
    "(NULL, 2, '', NULL, '2023-12-31 23:59:59'), (-3, -3, 'ab', -2.25, '2024-01-01 00:00'), "
    "(1, 5, 'a', 1.50, '2024-01-01 10:00'), (4, 0, NULL, 0, '2024-03-01 12:30')",
    "INSERT INTO t3 VALUES (1, 1, 'a'), (2, NULL, 'b'), (NULL, 3, NULL), (1, -1, ''), (5, 2, 'a')",
)

#: Column types per table, as the generator sees them.
COLUMNS: dict[str, dict[str, str]] = {
    "t1": {"a": "int", "b": "bigint", "n": "numeric", "f": "float", "s": "text", "p": "bool",
           "d": "date"},
    "t2": {"a": "int", "c": "int", "s": "text", "n": "numeric", "ts": "timestamp"},
    "t3": {"k": "int", "v": "int", "w": "text"},
}  # fmt: skip

LITERALS = {
    "int": ("0", "1", "-1", "2", "-3", "NULL"),
    "bigint": ("3000000000", "-7", "0"),
    "numeric": ("1.50", "-2.25", "0.5", "0"),
    "float": ("0.5::float8", "-1.5::float8", "2::float8"),
    "text": ("'a'", "''", "'B'", "'ab'", "NULL::text"),
    "bool": ("true", "false", "NULL::bool"),
    "date": ("DATE '2024-01-01'", "DATE '2023-12-31'"),
    "timestamp": ("TIMESTAMP '2024-01-01 10:00'",),
}

#: Change statements for views' histories: per table, inserts, deletes and updates.
CHANGES = {
    "t1": (
        "INSERT INTO t1 VALUES (1, 10, 1.50, 0.5, 'a', true, '2024-01-01')",
        "INSERT INTO t1 VALUES (NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
        "INSERT INTO t1 VALUES (5, -1, -0.50, -0.5, 'B', false, '2024-05-05')",
        "DELETE FROM t1 WHERE a = 1",
        "DELETE FROM t1 WHERE a IS NULL",
        "UPDATE t1 SET b = b + 1, s = 'B' WHERE a = 2",
        "UPDATE t1 SET n = NULL, p = NOT p WHERE a > 0",
    ),
    "t2": (
        "INSERT INTO t2 VALUES (2, 2, 'ab', 0.5, '2024-01-02 00:00')",
        "INSERT INTO t2 VALUES (NULL, NULL, NULL, NULL, NULL)",
        "DELETE FROM t2 WHERE c = 5",
        "DELETE FROM t2 WHERE a IS NULL",
        "UPDATE t2 SET c = NULL WHERE a = -3",
        "UPDATE t2 SET a = a + 1 WHERE s = 'B'",
    ),
    "t3": (
        "INSERT INTO t3 VALUES (2, 2, 'b'), (NULL, NULL, NULL)",
        "DELETE FROM t3 WHERE k = 1",
        "UPDATE t3 SET v = NULL WHERE k = 5",
        "UPDATE t3 SET k = 1 WHERE k IS NULL",
    ),
}


class Chooser(Protocol):
    """The source of a generator's choices."""

    def pick(self, options: Sequence[T]) -> T: ...
    def chance(self, p: float) -> bool: ...
    def below(self, n: int) -> int: ...


class RandomChooser:
    """Choices from a seeded `random.Random`."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def pick(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def below(self, n: int) -> int:
        return self.rng.randrange(n)


class HypothesisChooser:
    """Choices drawn from a hypothesis `data` object (they shrink)."""

    def __init__(self, data: Any) -> None:
        from hypothesis import strategies as st

        self.data, self.st = data, st

    def pick(self, options: Sequence[T]) -> T:
        return self.data.draw(self.st.sampled_from(list(options)))

    def chance(self, p: float) -> bool:
        return self.data.draw(self.st.integers(0, 999)) < p * 1000

    def below(self, n: int) -> int:
        return self.data.draw(self.st.integers(0, n - 1))


@dataclass
class Scope:
    """The columns an expression may name: (qualified name, type), innermost first."""

    columns: list[tuple[str, str]]
    outer: list[tuple[str, str]] = field(default_factory=list)

    def of(self, type_: str, outer: bool = False) -> list[str]:
        pool = self.outer if outer else self.columns
        return [name for name, t in pool if t == type_]


NUMBER_TYPES = ("int", "bigint", "numeric", "float")


class Generator:
    """One query's worth of random choices (see the module docstring)."""

    def __init__(self, choose: Chooser) -> None:
        self.c = choose
        self.aliases = 0

    def alias(self, stem: str) -> str:
        self.aliases += 1
        return f"{stem}{self.aliases}"

    # --- expressions ---------------------------------------------------------------------

    def expr(self, type_: str, scope: Scope, depth: int = 2) -> str:
        """An expression of `type_` over `scope`."""
        c = self.c
        columns = scope.of(type_)
        if depth <= 0 or c.chance(0.35):
            if columns and c.chance(0.75):
                return c.pick(columns)
            if scope.outer and scope.of(type_, outer=True) and c.chance(0.3):
                return c.pick(scope.of(type_, outer=True))
            return c.pick(LITERALS[type_])
        maker = getattr(self, f"_{type_}")
        return maker(scope, depth - 1)

    def _generic(self, type_: str, scope: Scope, depth: int) -> str | None:
        c = self.c
        e = self.expr
        roll = c.below(10)
        if roll == 0:
            return f"coalesce({e(type_, scope, depth)}, {e(type_, scope, depth)})"
        if roll == 1:
            return f"nullif({e(type_, scope, depth)}, {e(type_, scope, depth)})"
        if roll == 2:
            other = f" ELSE {e(type_, scope, depth)}" if c.chance(0.6) else ""
            return f"CASE WHEN {e('bool', scope, depth)} THEN {e(type_, scope, depth)}{other} END"
        if roll == 3 and type_ != "bool":
            fn = c.pick(("greatest", "least"))
            return f"{fn}({e(type_, scope, depth)}, {e(type_, scope, depth)})"
        return None

    def _int(self, scope: Scope, depth: int) -> str:
        c, e = self.c, self.expr
        generic = self._generic("int", scope, depth)
        if generic is not None:
            return generic
        roll = c.below(12)
        if roll < 4:
            op = c.pick(("+", "-", "*", "/", "%"))
            right = e("int", scope, depth)
            if op in "/%" and c.chance(0.8):
                right = f"nullif({right}, 0)"
            return f"({e('int', scope, depth)} {op} {right})"
        if roll == 4:
            return f"(-{e('int', scope, depth)})"
        if roll == 5:
            return f"abs({e('int', scope, depth)})"
        if roll == 6:
            return f"length({e('text', scope, depth)})"
        if roll == 7:
            source = c.pick(("numeric", "float", "bool", "bigint"))
            return f"CAST({e(source, scope, depth)} AS int)"
        if roll == 8:
            return f"CASE {e('int', scope, depth)} WHEN 1 THEN 10 WHEN -3 THEN 30 ELSE 0 END"
        if roll == 9:
            return f"position({e('text', scope, depth)} in {e('text', scope, depth)})"
        if roll == 10 and scope.of("date"):
            return f"({c.pick(scope.of('date'))} - DATE '2024-01-01')"
        return self.scalar_subquery("int", scope)

    def _bigint(self, scope: Scope, depth: int) -> str:
        c, e = self.c, self.expr
        generic = self._generic("bigint", scope, depth)
        if generic is not None:
            return generic
        roll = c.below(4)
        if roll == 0:
            return f"({e('bigint', scope, depth)} {c.pick('+-*')} {e('int', scope, depth)})"
        if roll == 1:
            return f"CAST({e('int', scope, depth)} AS bigint)"
        if roll == 2:
            return f"({e('bigint', scope, depth)} / nullif({e('int', scope, depth)}, 0))"
        return f"({e('bigint', scope, depth)} % nullif({e('bigint', scope, depth)}, 0))"

    def _numeric(self, scope: Scope, depth: int) -> str:
        c, e = self.c, self.expr
        generic = self._generic("numeric", scope, depth)
        if generic is not None:
            return generic
        roll = c.below(7)
        if roll == 0:
            return f"({e('numeric', scope, depth)} {c.pick('+-*')} {e('numeric', scope, depth)})"
        if roll == 1:
            return f"({e('numeric', scope, depth)} {c.pick('+-*')} {e('int', scope, depth)})"
        if roll == 2:
            return f"round({e('numeric', scope, depth)}, {c.pick(('0', '1', '-1'))})"
        if roll == 3:
            return (
                f"{c.pick(('trunc', 'ceil', 'floor', 'abs', 'sign'))}({e('numeric', scope, depth)})"
            )
        if roll == 4:
            return f"CAST({e(c.pick(('int', 'bigint')), scope, depth)} AS numeric)"
        if roll == 5:
            return f"({e('numeric', scope, depth)} % nullif({e('numeric', scope, depth)}, 0))"
        return f"round({e('numeric', scope, depth)} / nullif({e('int', scope, depth)}, 0), 4)"

    def _float(self, scope: Scope, depth: int) -> str:
        c, e = self.c, self.expr
        generic = self._generic("float", scope, depth)
        if generic is not None:
            return generic
        roll = c.below(5)
        if roll == 0:
            return f"({e('float', scope, depth)} {c.pick('+-*')} {e('float', scope, depth)})"
        if roll == 1:
            other = e(c.pick(NUMBER_TYPES), scope, depth)
            return f"({e('float', scope, depth)} {c.pick('+-*')} {other})"
        if roll == 2:
            return f"CAST({e(c.pick(('int', 'numeric', 'bigint')), scope, depth)} AS float8)"
        if roll == 3:
            return (
                f"{c.pick(('round', 'trunc', 'ceil', 'floor', 'abs'))}({e('float', scope, depth)})"
            )
        return f"({e('float', scope, depth)} / nullif({e('float', scope, depth)}, 0))"

    def _text(self, scope: Scope, depth: int) -> str:
        c, e = self.c, self.expr
        generic = self._generic("text", scope, depth)
        if generic is not None:
            return generic
        roll = c.below(10)
        if roll == 0:
            return f"({e('text', scope, depth)} || {e('text', scope, depth)})"
        if roll == 1:
            fn = c.pick(("upper", "lower", "btrim", "ltrim", "reverse", "md5", "initcap"))
            return f"{fn}({e('text', scope, depth)})"
        if roll == 2:
            start, count = c.pick(("0", "1", "2", "-1")), c.pick(("1", "2", "0"))
            return f"substr({e('text', scope, depth)}, {start}, {count})"
        if roll == 3:
            source = c.pick(("int", "bigint", "bool", "date", "numeric"))
            return f"CAST({e(source, scope, depth)} AS text)"
        if roll == 4:
            return f"concat({e('text', scope, depth)}, {e('int', scope, depth)})"
        if roll == 5:
            return f"replace({e('text', scope, depth)}, 'a', {e('text', scope, depth)})"
        if roll == 6:
            fn, count = c.pick(("left", "right")), c.pick(("1", "-1", "0", "5"))
            return f"{fn}({e('text', scope, depth)}, {count})"
        if roll == 7:
            return f"({e('text', scope, depth)} || {e('int', scope, depth)})"
        if roll == 8:
            return f"lpad({e('text', scope, depth)}, {c.pick(('0', '3'))}, 'x')"
        return f"concat_ws('-', {e('text', scope, depth)}, {e('text', scope, depth)})"

    def _date(self, scope: Scope, depth: int) -> str:
        c, e = self.c, self.expr
        generic = self._generic("date", scope, depth)
        if generic is not None:
            return generic
        return f"({e('date', scope, depth)} {c.pick('+-')} {e('int', scope, depth)})"

    def _timestamp(self, scope: Scope, depth: int) -> str:
        c, e = self.c, self.expr
        generic = self._generic("timestamp", scope, depth)
        if generic is not None:
            return generic
        if c.chance(0.5):
            return f"CAST({e('date', scope, depth)} AS timestamp)"
        return f"date_trunc('{c.pick(('day', 'hour', 'month'))}', {e('timestamp', scope, depth)})"

    def _bool(self, scope: Scope, depth: int) -> str:
        c, e = self.c, self.expr
        roll = c.below(20)
        if roll < 5:
            left_type = c.pick(
                ("int", "int", "bigint", "numeric", "float", "text", "date", "timestamp")
            )
            mixed = {"int": NUMBER_TYPES, "bigint": NUMBER_TYPES, "numeric": NUMBER_TYPES,
                     "float": NUMBER_TYPES, "text": ("text",), "date": ("date", "timestamp"),
                     "timestamp": ("date", "timestamp")}  # fmt: skip
            right_type = c.pick(mixed[left_type]) if c.chance(0.4) else left_type
            op = c.pick(("=", "<>", "<", "<=", ">", ">="))
            return f"({e(left_type, scope, depth)} {op} {e(right_type, scope, depth)})"
        if roll == 5:
            return f"({e('bool', scope, depth)} {c.pick(('AND', 'OR'))} {e('bool', scope, depth)})"
        if roll == 6:
            return f"(NOT {e('bool', scope, depth)})"
        if roll == 7:
            t = c.pick(("int", "text", "bool", "numeric"))
            return f"({e(t, scope, depth)} IS {c.pick(('', 'NOT '))}NULL)"
        if roll == 8:
            t = c.pick(("int", "text", "numeric"))
            negation = c.pick(("", "NOT "))
            return f"({e(t, scope, depth)} IS {negation}DISTINCT FROM {e(t, scope, depth)})"
        if roll == 9:
            items = ", ".join(c.pick(LITERALS["int"]) for _ in range(1 + c.below(3)))
            return f"({e('int', scope, depth)} {c.pick(('IN', 'NOT IN'))} ({items}))"
        if roll == 10:
            lo, hi = c.pick(LITERALS["int"]), c.pick(LITERALS["int"])
            sym = c.pick(("", "SYMMETRIC "))
            return f"({e('int', scope, depth)} {c.pick(('', 'NOT '))}BETWEEN {sym}{lo} AND {hi})"
        if roll == 11:
            pattern = c.pick(("'a%'", "'%b'", "'_'", "''", "'%'", "'A%'"))
            op = c.pick(("LIKE", "NOT LIKE", "ILIKE"))
            return f"({e('text', scope, depth)} {op} {pattern})"
        if roll == 12:
            negation, truth = c.pick(("", "NOT ")), c.pick(("TRUE", "FALSE", "UNKNOWN"))
            return f"({e('bool', scope, depth)} IS {negation}{truth})"
        if roll in (13, 14):
            return self.subquery_predicate(scope)
        if roll == 15:
            return f"({e('bool', scope, depth)} = {e('bool', scope, depth)})"
        if roll == 16:
            op = c.pick(("=", "<>", "<", "<=", ">", ">=", "IS DISTINCT FROM"))
            left = f"({e('int', scope, depth)}, {e('text', scope, depth)})"
            return f"({left} {op} ({e('int', scope, depth)}, {e('text', scope, depth)}))"
        if scope.of("bool"):
            return c.pick(scope.of("bool"))
        return c.pick(LITERALS["bool"])

    # --- subqueries ----------------------------------------------------------------------

    def _inner_table(self, scope: Scope) -> tuple[str, Scope]:
        """A table for a subquery, its alias, and the scope inside (outer columns visible)."""
        table = self.c.pick(sorted(TABLES))
        alias = self.alias("q")
        inner = [(f"{alias}.{col}", t) for col, t in COLUMNS[table].items()]
        return f"{table} {alias}", Scope(inner, scope.columns + scope.outer)

    def _correlation(self, inner: Scope) -> str:
        """A WHERE for a subquery: often tying an inner column to an outer one."""
        c = self.c
        if inner.outer and c.chance(0.7):
            t = c.pick(("int", "text"))
            if inner.of(t) and inner.of(t, outer=True):
                left, right = c.pick(inner.of(t)), c.pick(inner.of(t, outer=True))
                extra = f" AND {self.expr('bool', inner, 1)}" if c.chance(0.3) else ""
                return f" WHERE {left} {c.pick(('=', '=', '<', '<>'))} {right}{extra}"
        if c.chance(0.5):
            return f" WHERE {self.expr('bool', Scope(inner.columns), 1)}"
        return ""

    def scalar_subquery(self, type_: str, scope: Scope) -> str:
        """A subquery of one row and column of `type_` (an aggregate, or LIMIT 1)."""
        c = self.c
        table, inner = self._inner_table(scope)
        where = self._correlation(inner)
        cols = inner.of(type_) or inner.of("int")
        col = c.pick(cols)
        if c.chance(0.7):
            agg = (
                c.pick(("max", "min", "count", "sum")) if type_ == "int" else c.pick(("max", "min"))
            )
            value = f"{agg}({col})" if agg != "count" else f"count({c.pick((col, '*'))})"
            if agg == "sum":
                value = f"CAST(sum({col}) AS int)"
            return f"(SELECT {value} FROM {table}{where})"
        return f"(SELECT {col} FROM {table}{where} ORDER BY {col} NULLS FIRST LIMIT 1)"

    def subquery_predicate(self, scope: Scope) -> str:
        """EXISTS, IN, NOT IN, ANY or ALL over a (maybe correlated) subquery."""
        c = self.c
        table, inner = self._inner_table(scope)
        where = self._correlation(inner)
        roll = c.below(5)
        if roll == 0:
            nested = ""
            if c.chance(0.4):
                # Two levels: the innermost subquery reads the outermost query's columns.
                deeper = self.subquery_predicate(inner)
                nested = f"{' AND' if where else ' WHERE'} {deeper}"
            return f"({c.pick(('', 'NOT '))}EXISTS (SELECT 1 FROM {table}{where}{nested}))"
        t = c.pick(("int", "text"))
        cols = inner.of(t)
        if not cols:
            t, cols = "int", inner.of("int")
        left = self.expr(t, scope, 1)
        column = c.pick(cols)
        if roll in (1, 2):
            return f"({left} {c.pick(('IN', 'NOT IN'))} (SELECT {column} FROM {table}{where}))"
        op = c.pick(("=", "<>", "<", ">="))
        quant = c.pick(("ANY", "ALL", "SOME"))
        return f"({left} {op} {quant} (SELECT {column} FROM {table}{where}))"

    # --- FROM ----------------------------------------------------------------------------

    def from_clause(self) -> tuple[str, Scope]:
        """A FROM clause and the scope of its columns."""
        c = self.c
        t1 = c.pick(sorted(TABLES))
        a1 = self.alias("x")
        scope = [(f"{a1}.{col}", t) for col, t in COLUMNS[t1].items()]
        if c.chance(0.35):
            return f"{t1} {a1}", Scope(scope)
        t2 = c.pick(sorted(TABLES))
        a2 = self.alias("y")
        right = [(f"{a2}.{col}", t) for col, t in COLUMNS[t2].items()]
        both = Scope(scope + right)
        kind = c.pick(("JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "CROSS JOIN", ",",
                       "LATERAL", "USING", "NATURAL"))  # fmt: skip
        outer = c.pick(("JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"))
        if kind in ("CROSS JOIN", ","):
            return f"{t1} {a1} {kind} {t2} {a2}", both
        if kind == "LATERAL":
            # The right side reads the left's columns.
            inner = Scope(right, scope)
            where = self._correlation(inner)
            cols = ", ".join(f"{a2}.{col}" for col in COLUMNS[t2])
            sub = self.alias("l")
            lateral = [(f"{sub}.{col}", t) for col, t in COLUMNS[t2].items()]
            join = c.pick(("CROSS JOIN", "JOIN"))
            on = " ON true" if join == "JOIN" else ""
            return (
                f"{t1} {a1} {join} LATERAL (SELECT {cols} FROM {t2} {a2}{where}) {sub}{on}",
                Scope(scope + lateral),
            )
        shared = sorted(
            set(COLUMNS[t1]) & set(COLUMNS[t2]) - {"n"} if t1 != t2 else set(COLUMNS[t1])
        )
        shared = [col for col in shared if COLUMNS[t1][col] == COLUMNS[t2][col]]
        if kind in ("USING", "NATURAL") and shared:
            keys = [col for col in shared if c.chance(0.6)] or shared[:1]
            merged = [(col, COLUMNS[t1][col]) for col in keys]
            rest = [(n, t) for n, t in both.columns if n.split(".")[1] not in keys]
            if kind == "NATURAL" and set(shared) == set(keys) and t1 != t2:
                sql = f"{t1} {a1} NATURAL {outer} {t2} {a2}"
                return sql, Scope(merged + rest)
            return f"{t1} {a1} {outer} {t2} {a2} USING ({', '.join(keys)})", Scope(merged + rest)
        if kind in ("USING", "NATURAL"):
            kind = outer
        on = self.on_condition(scope, right)
        return f"{t1} {a1} {kind} {t2} {a2} ON {on}", both

    def on_condition(self, left: list[tuple[str, str]], right: list[tuple[str, str]]) -> str:
        """An ON condition: an equality, a non-equi comparison, or either with more."""
        c = self.c
        pairs = [
            (ln, rn) for ln, lt in left for rn, rt in right if lt == rt and lt in ("int", "text")
        ]
        if not pairs or c.chance(0.1):
            return self.expr("bool", Scope(left + right), 1)
        ln, rn = c.pick(pairs)
        op = c.pick(("=", "=", "=", "<", "<>", ">="))
        cond = f"{ln} {op} {rn}"
        if c.chance(0.3):
            cond += f" {c.pick(('AND', 'OR'))} {self.expr('bool', Scope(left + right), 1)}"
        return cond

    # --- SELECT --------------------------------------------------------------------------

    def select(self, allow_order: bool = True) -> tuple[str, list[str], bool]:
        """A SELECT, its output column types, and whether its ORDER BY is total."""
        c = self.c
        source, scope = self.from_clause()
        where = f" WHERE {self.expr('bool', scope)}" if c.chance(0.6) else ""
        types = [c.pick(("int", "int", "text", "numeric", "bigint", "float", "bool", "date"))
                 for _ in range(1 + c.below(3))]  # fmt: skip
        if c.chance(0.35):
            return self._grouped(source, scope, where, types, allow_order)
        items = [f"{self.expr(t, scope)} AS c{i}" for i, t in enumerate(types)]
        distinct = "DISTINCT " if c.chance(0.2) else ""
        sql = f"SELECT {distinct}{', '.join(items)} FROM {source}{where}"
        ordered = False
        if allow_order and c.chance(0.3):
            sql, ordered = self._order(sql, len(items))
        return sql, types, ordered

    def _grouped(
        self, source: str, scope: Scope, where: str, types: list[str], allow_order: bool
    ) -> tuple[str, list[str], bool]:
        c = self.c
        keys = []
        for t in types[: 1 + c.below(2)]:
            cols = scope.of(t)
            keys.append(c.pick(cols) if cols and c.chance(0.8) else self.expr(t, scope, 1))
        if c.chance(0.15):
            keys = []
        items = [f"{k} AS g{i}" for i, k in enumerate(keys)]
        out = list(types[: len(keys)])
        for _ in range(1 + c.below(2)):
            agg, t = self._aggregate(scope)
            items.append(f"{agg} AS a{len(items)}")
            out.append(t)
        group = ""
        if keys:
            mode = c.below(10)
            if mode == 0 and len(keys) > 0:
                group = f" GROUP BY ROLLUP ({', '.join(keys)})"
            elif mode == 1:
                group = f" GROUP BY CUBE ({', '.join(keys)})"
            elif mode == 2:
                group = f" GROUP BY GROUPING SETS (({', '.join(keys)}), ())"
            else:
                group = f" GROUP BY {', '.join(keys)}"
        elif c.chance(0.3):
            group = " GROUP BY ()"  # the empty grouping set: one row, even of no input
        having = ""
        if not keys and c.chance(0.2):
            # A HAVING that reads no aggregate filters the global aggregate's one row.
            having = f" HAVING {c.pick(('true', 'false', '1 > 2', 'NULL::bool'))}"
        elif c.chance(0.4):
            agg, t = self._aggregate(scope)
            bound = c.pick(LITERALS[t] if t in LITERALS else ("1",))
            having = f" HAVING {agg} {c.pick(('>', '<=', '=', '<>'))} {bound}"
            if t in ("text", "date", "bool"):
                having = f" HAVING {agg} IS NOT NULL"
        sql = f"SELECT {', '.join(items)} FROM {source}{where}{group}{having}"
        ordered = False
        if allow_order and c.chance(0.3):
            sql, ordered = self._order(sql, len(items))
        return sql, out, ordered

    def _aggregate(self, scope: Scope) -> tuple[str, str]:
        """An aggregate call over `scope` and its result's type."""
        c = self.c
        roll = c.below(9)
        distinct = "DISTINCT " if c.chance(0.2) else ""
        filt = f" FILTER (WHERE {self.expr('bool', scope, 1)})" if c.chance(0.1) else ""
        if roll == 0:
            return f"count(*){filt}", "bigint"
        if roll == 1:
            return (
                f"count({distinct}{self.expr(c.pick(('int', 'text')), scope, 1)}){filt}",
                "bigint",
            )
        if roll == 2:
            t = c.pick(("int", "bigint", "numeric"))
            return (
                f"sum({distinct}{self.expr(t, scope, 1)}){filt}",
                "numeric" if t != "int" else "bigint",
            )
        if roll == 3:
            t = c.pick(("int", "text", "numeric", "date", "float", "bool"))
            fn = c.pick(("min", "max"))
            if t == "bool":
                fn = c.pick(("bool_and", "bool_or"))
            return f"{fn}({self.expr(t, scope, 1)}){filt}", t
        if roll == 4:
            return (
                f"round(avg({distinct}{self.expr(c.pick(('int', 'numeric')), scope, 1)}), 6)",
                "numeric",
            )
        if roll == 5:
            return f"sum({self.expr('float', scope, 1)})", "float"
        if roll == 6:
            # Ordered by its own argument: ties then print alike, so the text is determined.
            arg = self.expr("text", scope, 1)
            return f"string_agg({arg}, ',' ORDER BY {arg} NULLS FIRST)", "text"
        if roll == 7:
            return f"coalesce(max({self.expr('int', scope, 1)}), -99)", "int"
        return f"count({distinct}{self.expr('bool', scope, 1)})", "bigint"

    def _order(self, sql: str, width: int) -> tuple[str, bool]:
        c = self.c
        terms = []
        for i in c.pick((list(range(1, width + 1)), list(range(width, 0, -1)))):
            terms.append(
                f"{i}{c.pick(('', ' DESC', ' ASC'))}{c.pick(('', ' NULLS FIRST', ' NULLS LAST'))}"
            )
        tail = ""
        if c.chance(0.6):
            tail += f" LIMIT {c.pick(('0', '1', '2', '3', '5'))}"
        if c.chance(0.3):
            tail += f" OFFSET {c.pick(('0', '1', '2', '4'))}"
        return f"{sql} ORDER BY {', '.join(terms)}{tail}", True


@dataclass(frozen=True)
class Query:
    """A generated query and whether its ORDER BY fixes the rows' order."""

    sql: str
    ordered: bool


def query(choose: Chooser) -> Query:
    """A random query: a SELECT, a set operation of two, or a CTE over one."""
    g = Generator(choose)
    roll = choose.below(10)
    if roll < 7:
        sql, _, ordered = g.select()
        return Query(sql, ordered)
    if roll < 9:
        left, types, _ = g.select(allow_order=False)
        right_gen = Generator(choose)
        right_gen.aliases = 50
        for _ in range(20):
            right, rtypes, _ = right_gen.select(allow_order=False)
            if rtypes == types:
                break
        else:
            right = "SELECT " + ", ".join(
                f"{LITERALS[t][0]} AS c{i}" if t != "float" else f"1.5::float8 AS c{i}"
                for i, t in enumerate(types)
            )
        op = choose.pick(
            ("UNION", "UNION ALL", "INTERSECT", "INTERSECT ALL", "EXCEPT", "EXCEPT ALL")
        )
        sql = f"({left}) {op} ({right})"
        if choose.chance(0.3):
            sql, ordered = g._order(sql, len(types))
            return Query(sql, ordered)
        return Query(sql, False)
    inner, types, _ = g.select(allow_order=False)
    cols = ", ".join(f"w.{name}" for name in _output_names(inner, len(types)))
    sql = f"WITH w AS ({inner}) SELECT {cols} FROM w"
    if choose.chance(0.5):
        sql += f" WHERE {cols.split(', ')[0]} IS NOT NULL"
    return Query(sql, False)


def _output_names(sql: str, width: int) -> list[str]:
    """The output column names the generator gave a SELECT (`c0..`, or `g0.., aN..`)."""
    names = []
    for i in range(width):
        for stem in ("c", "g", "a"):
            if f" AS {stem}{i}" in sql:
                names.append(f"{stem}{i}")
                break
    return names
