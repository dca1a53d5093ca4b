"""The fuzzer's corpus: the statements of the vendored sqllogictest suites, plus dsql's own.

`suite_statements()` reads every `statement`/`query` record's SQL from
`tests/slt/suites` with a deliberately small reader (the runner in `tests/slt` is
another component; the fuzzer needs only the text). `setup_statements()` is the
schema and a few rows per table the corpus reads, so a mutated statement that still
parses reaches binding and execution. Everything is sorted, so the corpus (and a
seeded fuzz run over it) is the same on every machine.

>>> any(s.startswith("SELECT") for s in suite_statements())
True
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from pathlib import Path

SUITES = Path(__file__).resolve().parent.parent / "slt" / "suites"
_RECORD = re.compile(r"^(statement|query)\b")

#: dsql's statements beyond SQLite's dialect, over the setup tables (see `setup_statements`).
DSQL_STATEMENTS = (
    "SUBSCRIBE t1",
    "SUBSCRIBE (SELECT a, count(*) FROM t1 GROUP BY a) WITH (SNAPSHOT = false)",
    "SUBSCRIBE TO t1 WITH (PROGRESS = true) AS OF 0 UP TO 5",
    "DECLARE c1 CURSOR FOR SUBSCRIBE t1",
    "FETCH 2 c1",
    "CLOSE c1",
    "ADVANCE TO 1000",
    "ADVANCE BY INTERVAL '5 minutes'",
    "BEGIN",
    "COMMIT",
    "SET statement_timeout = '1s'",
    "SHOW TABLES",
    "SHOW COLUMNS FROM t1",
    "SHOW MATERIALIZED VIEWS",
    "SHOW ARRANGEMENTS",
    "SHOW CREATE VIEW v_sum",
    "EXPLAIN SELECT a FROM t1 WHERE b > 1",
    "EXPLAIN OPTIMIZED SELECT a, sum(b) FROM t1 GROUP BY a",
    "CREATE MATERIALIZED VIEW mv_f AS SELECT a, max(b) AS m FROM t1 GROUP BY a",
    "CREATE VIEW v_f AS SELECT * FROM t1 WHERE a > 100",
    "CREATE INDEX i_f ON v_f (a)",
    "DROP VIEW IF EXISTS v_f CASCADE",
    "SELECT * FROM t1 AS OF 0",
    "SELECT mz_now()",
    "SELECT a FROM t1 WHERE mz_now() < a + 1000",
    "SELECT * FROM generate_series(1, 5) AS g(x)",
    "SELECT unnest(ARRAY[1, 2, 3]) AS x",
    "SELECT a, b FROM t1 ORDER BY a DESC NULLS LAST LIMIT 2 OFFSET 1",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION SELECT n + 1 FROM r WHERE n < 10) SELECT * FROM r",
    "WITH MUTUALLY RECURSIVE (RETURN AT RECURSION LIMIT 5) r(n int) AS "
    "(SELECT 1 UNION SELECT n + 1 FROM r) SELECT * FROM r",
    "WITH MUTUALLY RECURSIVE (ERROR AT RECURSION LIMIT 5) r(n int) AS "
    "(SELECT 1 UNION SELECT n + 1 FROM r) SELECT * FROM r",
    "WITH MUTUALLY RECURSIVE even(n int) AS (SELECT 0 UNION SELECT n + 1 FROM odd "
    "WHERE n < 6), odd(n int) AS (SELECT n + 1 FROM even WHERE n < 6) SELECT * FROM even",
    "SELECT x.a, y.b FROM t1 x LEFT JOIN t1 y ON x.a = y.b WHERE y.b IS NULL",
    "SELECT a FROM t1 WHERE EXISTS (SELECT 1 FROM t1 z WHERE z.b = t1.a)",
    "INSERT INTO t1 SELECT a + 1, b, c, d, e FROM t1 WHERE a < 0",
    "UPDATE t1 SET b = b + 1 WHERE a = -1",
    "DELETE FROM t1 WHERE a = -1",
)

#: Statements that never converge: each must end by the statement timeout or a round limit.
NON_TERMINATING = (
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
    "WITH RECURSIVE r(n) AS (SELECT a FROM t1 UNION ALL SELECT n + 1 FROM r) SELECT max(n) FROM r",
    "WITH MUTUALLY RECURSIVE r(n int) AS (SELECT 1 UNION SELECT n + 1 FROM r) SELECT * FROM r",
    "CREATE MATERIALIZED VIEW mv_loop AS WITH RECURSIVE r(n) AS "
    "(SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
    "SUBSCRIBE (WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r)",
    "INSERT INTO t1 (a) WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
    "SELECT max(n) FROM r",
)


def _records(path: Path) -> list[str]:
    """The SQL of each `statement`/`query` record of one file (up to `----` or a blank line)."""
    out: list[str] = []
    current: list[str] | None = None
    for line in path.read_text(errors="replace").splitlines():
        if current is None:
            if _RECORD.match(line):
                current = []
            continue
        if not line.strip() or line.startswith("----"):
            if current:
                out.append("\n".join(current).strip())
            current = None
            continue
        current.append(line)
    if current:
        out.append("\n".join(current).strip())
    return [s.rstrip(";").strip() for s in out if s.strip()]


@cache
def suite_statements() -> tuple[str, ...]:
    """Every distinct statement of the vendored suites, sorted."""
    found: set[str] = set()
    for path in sorted(SUITES.rglob("*.test*")):
        found.update(_records(path))
    return tuple(sorted(found))


@cache
def setup_statements(tables: int = 12) -> tuple[str, ...]:
    """CREATE TABLE and up to four INSERTs for each of the `tables` tables the corpus reads
    most (each by the definition whose column names the corpus uses most), so mutated
    statements find their names."""
    creates: dict[str, set[str]] = {}
    inserts: dict[str, list[str]] = {}
    for s in suite_statements():
        create = re.match(r"(?is)create\s+table\s+(\w+)\s*\(", s)
        if create and ";" not in s:
            creates.setdefault(create.group(1).lower(), set()).add(s)
        insert = re.match(r"(?is)insert\s+into\s+(\w+)\s*(\([\w\s,]*\))?\s*values", s)
        if insert and ";" not in s:
            inserts.setdefault(insert.group(1).lower(), []).append(s)
    words = Counter(w.lower() for s in suite_statements() for w in re.findall(r"\w+", s))
    chosen = sorted(creates, key=lambda name: (-words[name], name))[:tables]
    out = []
    for name in sorted(chosen):
        definition = max(sorted(creates[name]), key=lambda d: _score(d, words))
        # Inserts naming their columns first: they fit whichever definition was chosen.
        rows = sorted(inserts.get(name, []), key=lambda i: (not insert_names(i), i))
        out += [definition, *rows[:4]]  # some may still not fit: setup skips those
    return tuple(out)


def insert_names(statement: str) -> bool:
    return bool(re.match(r"(?is)insert\s+into\s+\w+\s*\(", statement))


def _score(definition: str, words: Counter[str]) -> int:
    return sum(words[w.lower()] for w in set(re.findall(r"\w+", definition)))


#: Materialized views over `t1` kept through the fuzz: each is re-evaluated from scratch
#: at the end and must agree (errors must not corrupt what existing dataflows maintain).
VIEWS = {
    "v_sum": "SELECT count(*) AS n, sum(a) AS s, max(b) AS m FROM t1",
    "v_pairs": "SELECT x.a, y.b FROM t1 x JOIN t1 y ON x.a = y.a WHERE x.c IS NOT NULL",
}
