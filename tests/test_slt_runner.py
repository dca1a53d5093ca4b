"""The sqllogictest runner (tests/slt): parser, result formatting, both run modes.

The parser and the comparison rules are checked on small inline files; the runner is
proven on SQLite's select1.test, which DuckDB must pass in full in both modes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import pytest
from slt.background import jobs_for
from slt.engines import DuckDBEngine, EngineError
from slt.execute import Chunk, run_file
from slt.incremental import ViewPlan, ddl_effect, strip_terminator
from slt.parser import SltSyntaxError, parse, parse_file
from slt.records import (
    Condition,
    Disposition,
    ExpectedError,
    Halt,
    Hashed,
    Query,
    Require,
    SortMode,
    Statement,
    Values,
)
from slt.results import compare, format_row, format_value, md5_of, ordered_values
from slt.runner import main, run_suite
from slt.skips import SkipEntry, SkipList

# A copy of ../shared/slt (SQLite public domain, DuckDB MIT), so CI needs nothing beside the repo.
SUITES = Path(__file__).resolve().parent / "slt" / "suites"
SELECT1 = SUITES / "sqlite" / "select1.test"
# Engines that must pass select1 in full (dsql runs it below, with its own skip list).
ENGINES = ["duckdb"]
MODES = ["direct", "incremental"]


def one(text: str):
    (entry,) = parse(text, "t.test")
    return entry


def run_text(tmp_path: Path, text: str, mode: str = "direct", skips: SkipList | None = None):
    path = tmp_path / "t.test"
    path.write_text(text)
    return run_file(str(path), lambda _: DuckDBEngine(), "duckdb", mode, skips or SkipList())


def statuses(report) -> list[str]:
    return [o.status for o in report.outcomes]


# --- parser: SQLite's format --------------------------------------------------------------


def test_statement_records_and_locations():
    entries = parse(
        "# comment\n\nstatement ok\nCREATE TABLE t(a INT)\n\nstatement error\nSELECT nope\n",
        "f.test",
    )
    assert [type(e) for e in entries] == [Statement, Statement]
    ok, error = entries
    assert (ok.location.file, ok.location.line) == ("f.test", 3)
    assert ok.disposition is Disposition.OK and ok.sql == "CREATE TABLE t(a INT)"
    assert error.disposition is Disposition.ERROR and error.error is None
    assert error.location.line == 6


def test_query_types_sort_label_and_values():
    q = one("query IT rowsort label-7\nSELECT a,\n b FROM t\n----\n1\nx\n2\ny\n")
    assert isinstance(q, Query)
    assert (q.types, q.sort, q.label) == ("IT", SortMode.ROWSORT, "label-7")
    assert q.sql == "SELECT a,\n b FROM t"
    assert q.expected == Values(("1", "x", "2", "y"))
    assert one("query I\nSELECT 1\n----\n1\n").sort is SortMode.NOSORT
    assert one("query I valuesort\nSELECT 1\n----\n1\n").sort is SortMode.VALUESORT


def test_hashed_results_and_threshold():
    text = "hash-threshold 4\n\nquery I nosort\nSELECT 1\n----\n30 values hashing to ABCdef01\n"
    q = one(text)
    assert q.expected == Hashed(30, "abcdef01")
    assert q.hash_threshold == 4
    assert one("query I\nSELECT 1\n----\n1\n").hash_threshold == 8  # SQLite's default


def test_skipif_onlyif_with_trailing_comment():
    q = one("skipif mysql # reason\nonlyif sqlite # empty RHS\nquery I\nSELECT 1\n----\n1\n")
    assert q.conditions == (Condition("mysql", only=False), Condition("sqlite", only=True))
    names = frozenset({"duckdb"})
    assert [c.excludes(names) for c in q.conditions] == [False, True]


def test_halt_is_a_control_with_its_conditions():
    entries = parse("onlyif mssql\nhalt\n\nstatement ok\nSELECT 1\n", "t.test")
    assert isinstance(entries[0], Halt) and entries[0].conditions == (Condition("mssql", True),)
    assert isinstance(entries[1], Statement) and entries[1].conditions == ()


def test_blank_line_ends_a_record_and_results_may_be_empty():
    a, b = parse("query I nosort\nSELECT 1 WHERE false\n----\n\nstatement ok\nSELECT 2\n", "t")
    assert a.expected == Values(()) and b.sql == "SELECT 2"


# --- parser: Materialize's extensions -----------------------------------------------------


def test_error_regexes_inline():
    s = one("statement error pgcode 42P01 unknown catalog item '.*'\nSELECT * FROM x\n")
    assert s.error == ExpectedError("unknown catalog item '.*'")
    q = one("query error division by zero\nSELECT 1/0\n")
    assert q.error == ExpectedError("division by zero") and q.expected is None


def test_cockroach_mode_rows_split_on_whitespace():
    text = "mode cockroach\n\nquery IT rowsort\nSELECT 1\n----\n2 b␠c\n1  a\n\nmode standard\n\n"
    text += "query T\nSELECT 1\n----\na b\n"
    cockroach, standard = parse(text, "t.test")
    assert cockroach.expected == Values(("2", "b c", "1", "a"))
    assert standard.expected == Values(("a b",))


def test_multiline_and_colnames():
    q = one("query T multiline\nSELECT 1\n----\nline 1\n\nline 3\nEOF\n\n")
    assert q.multiline and q.expected == Values(("line 1\n\nline 3",))
    q = one("query IT colnames\nSELECT 1 AS a, 'x' AS my␠b\n----\na my␠b\n1 x\n")
    assert q.column_names == ("a", "my b")


# --- parser: DuckDB's variants --------------------------------------------------------------


def test_duckdb_tab_rows_and_error_messages():
    q = one("query II\nSELECT 1, 2\n----\n1\t2\n3\t4\n")
    assert q.expected == Values(("1", "2", "3", "4"))
    s = one("statement error\nSELECT x\n----\nBinder Error: x (y)\n")
    assert s.error == ExpectedError(r"Binder\ Error:\ x\ \(y\)", dialect="duckdb")
    s = one("statement error\nSELECT x\n----\n<REGEX>:.*Conversion.*\n")
    assert s.error == ExpectedError(".*Conversion.*", dialect="duckdb")
    s = one("statement maybe\nSELECT x\n----\n<!REGEX>:.*INTERNAL.*\n")
    assert s.disposition is Disposition.MAYBE and s.error.negate


def test_loops_expand_with_substitution():
    text = "loop i 0 3\n\nstatement ok\nINSERT INTO t VALUES (${i})\n\nendloop\n\n"
    text += "foreach v a b\n\nquery T\nSELECT '${v}'\n----\n${v}\n\nendloop\n"
    entries = parse(text, "t.test")
    assert [e.sql for e in entries] == [
        "INSERT INTO t VALUES (0)",
        "INSERT INTO t VALUES (1)",
        "INSERT INTO t VALUES (2)",
        "SELECT 'a'",
        "SELECT 'b'",
    ]
    assert entries[3].expected == Values(("a",))
    with pytest.raises(SltSyntaxError, match="endloop"):
        parse("loop i 0 2\nstatement ok\nSELECT 1\n", "t.test")


def test_require_mode_skip_and_unsupported_directives():
    text = "require no_alternative_verify\n\nmode skip\n\nstatement ok\nSELECT 1\n\n"
    text += "mode unskip\n\nstatement ok\nSELECT 2\n\nload x.db\n\nstatement ok\nSELECT 3\n\n"
    text += "query I\nSELECT 4\n----\n<FILE>:x.csv\n"
    req, skipped, kept, after_load, from_file = parse(text, "t.test")
    assert isinstance(req, Require) and req.what == "no_alternative_verify"
    assert skipped.skip_reason == "`mode skip` (line 3)"
    assert kept.skip_reason is None
    assert after_load.skip_reason == "unsupported directive `load` (line 13)"
    assert from_file.skip_reason == "unsupported directive `load` (line 13)"
    assert "FILE" in one("query I\nSELECT 4\n----\n<FILE>:x.csv\n").skip_reason


def test_duckdb_files_parse():
    for path in sorted((SUITES / "duckdb").iterdir()):
        assert parse_file(str(path)), path


# --- results ------------------------------------------------------------------------------


def test_formatting_by_type():
    assert format_row((7, 7.6, -7.6, "12abc", True, None), "IIIIII") == (
        "7", "7", "-7", "12", "1", "NULL",
    )  # fmt: skip
    assert format_row((1, 2.0, 0.3333, None), "RRRR") == ("1.000", "2.000", "0.333", "NULL")
    assert format_row(("", "a b", "x\ty", None), "TTTT") == ("(empty)", "a b", "x@y", "NULL")
    assert format_value(True, "B") == "true"
    assert format_row((True, "", 0.5), "III", native=True) == ("true", "(empty)", "0.5")


def test_md5_is_sqlites_hash():
    values = ["1", "(empty)", "NULL"]
    assert md5_of(values) == hashlib.md5(b"1\n(empty)\nNULL\n").hexdigest()


def test_sort_modes():
    rows = [("2", "a"), ("10", "b"), ("1", "c")]
    assert ordered_values(rows, SortMode.NOSORT) == ["2", "a", "10", "b", "1", "c"]
    assert ordered_values(rows, SortMode.ROWSORT) == ["1", "c", "10", "b", "2", "a"]  # strcmp
    assert ordered_values(rows, SortMode.VALUESORT) == ["1", "10", "2", "a", "b", "c"]


def test_compare_values_and_hashes():
    rows = [("2",), ("1",)]
    assert compare(Values(("1", "2")), rows, SortMode.ROWSORT, 1).ok
    assert not compare(Values(("1", "2")), rows, SortMode.NOSORT, 1).ok
    assert compare(Hashed(2, md5_of(["1", "2"])), rows, SortMode.VALUESORT, 1).ok
    miss = compare(Hashed(2, md5_of(["1", "2"])), rows, SortMode.NOSORT, 1)
    assert not miss.ok and "hashing to" in miss.detail
    assert compare(Values(("0.5",)), [("0.50",)], SortMode.NOSORT, 1).ok  # numerically equal
    assert compare(Values(("<REGEX>:a.*z",)), [("a\nz",)], SortMode.NOSORT, 1).ok


# --- running inline files on DuckDB -------------------------------------------------------

BASIC = """statement ok
CREATE TABLE t(a INTEGER, b TEXT)

statement ok
INSERT INTO t VALUES (1, 'x'), (2, ''), (NULL, 'z')

query IT rowsort
SELECT a, b FROM t
----
1
x
2
(empty)
NULL
z

statement error
SELECT nope FROM t

query error Referenced column "nope" not found
SELECT nope FROM t

onlyif sqlite
query I
SELECT 1 IN ()
----
0

query I nosort
SELECT a FROM t WHERE a IS NOT NULL ORDER BY a DESC
----
2
1

halt

query I
SELECT 'never'
----
x
"""


@pytest.mark.parametrize("mode", MODES)
def test_runs_records_with_outcomes(tmp_path, mode):
    report = run_text(tmp_path, BASIC, mode)
    assert statuses(report) == ["pass"] * 5 + ["skip", "pass", "skip"]
    assert [o.detail for o in report.outcomes if o.status == "skip"] == [
        "onlyif sqlite",
        "after `halt` (line 35)",
    ]


def test_failures_say_why(tmp_path):
    text = "statement error\nSELECT 1\n\nstatement ok\nSELECT nope\n\n"
    text += "query I nosort\nSELECT 1 UNION ALL SELECT 2\n----\n2\n1\n\n"
    text += "query II\nSELECT 1\n----\n1\n\nquery error wrong text\nSELECT nope\n\n"
    text += "query I nosort lab\nSELECT 1\n----\n1\n\nquery I nosort lab\nSELECT 2\n----\n2\n"
    details = [o.detail for o in run_text(tmp_path, text).outcomes]
    assert details[0] == "statement succeeded; an error was expected"
    assert details[1].startswith("statement failed: Binder Error")
    assert details[2].startswith("value 1 differs: expected '2', got '1'")
    assert details[3] == "expected 2 columns (II), got 1"
    assert details[4].startswith("expected an error matching 'wrong text'")
    assert (details[5], details[6]) == ("", "result differs from label lab")


def test_duckdb_error_messages_are_checked_only_on_duckdb(tmp_path):
    text = "statement error\nSELECT nope\n----\nsomething else entirely\n"
    report = run_text(tmp_path, text)
    assert report.outcomes[0].status == "fail"

    class OtherEngine(DuckDBEngine):
        error_dialects = frozenset({"dsql"})

    path = tmp_path / "t.test"
    report = run_file(str(path), lambda _: OtherEngine(), "other", "direct", SkipList())
    assert report.outcomes[0].status == "pass"


def test_skip_list_reasons_and_unused_entries(tmp_path):
    (tmp_path / "t.test").write_text("statement ok\nSELECT 1\n\nstatement ok\nSELECT 2\n")
    skips = SkipList(
        (
            SkipEntry(file="t.test", line=4, reason="two is special"),
            SkipEntry(file="t.test", sql="SELECT 3", reason="stale"),
            SkipEntry(file="t.test", line=1, engines=("dsql",), reason="other engine"),
        )
    )
    report = run_suite([tmp_path / "t.test"], skips=skips)
    assert report.summary == "1 passed, 0 failed, 1 skipped"
    assert report.skip_reasons() == {"skip list: two is special": 1}
    assert report.unused_skips == ["t.test:* (stale)"]


def test_checked_in_skip_list_loads():
    skips = SkipList.load()
    assert skips.entries and all(e.reason for e in skips.entries)


# --- incremental mode ---------------------------------------------------------------------


def test_view_plans():
    plan = ViewPlan.of(
        "WITH c AS (SELECT * FROM t1) SELECT x AS y, b FROM c, t2 ORDER BY y", "duckdb"
    )
    assert plan.relations == {"t1", "t2"} and plan.order_by == "1" and plan.ordered
    assert ViewPlan.of("SELECT a + 1, b FROM t ORDER BY a + 1 DESC, 2", "duckdb").order_by == (
        "1 DESC, 2"
    )
    unmappable = ViewPlan.of("SELECT a FROM t ORDER BY b", "duckdb")
    assert unmappable.order_by is None and unmappable.ordered
    assert ViewPlan.of("SELECT * FROM t ORDER BY 2", "duckdb").order_by == "2"
    assert ViewPlan.of("SELECT * FROM t ORDER BY a", "duckdb").order_by is None
    assert ViewPlan.of("PRAGMA version", "duckdb") is None
    assert ddl_effect("CREATE TABLE T1(a INT)", "duckdb") == ({"t1"}, set())
    assert ddl_effect("INSERT INTO t1 VALUES (1)", "duckdb") == (set(), set())
    assert ddl_effect("DROP TABLE IF EXISTS t1, t2", "duckdb") == (set(), {"t1", "t2"})
    assert ddl_effect("CREATE VIEW v(x) AS SELECT 1", "duckdb") == ({"v"}, set())
    assert strip_terminator("SELECT 1 ;  \n") == "SELECT 1"
    # dsql's statements that read cursors, subscriptions or the past run at their place.
    for direct in ("FETCH ALL c", "SUBSCRIBE v", "SELECT * FROM v AS OF 10", "SHOW TABLES"):
        assert ViewPlan.of(direct, "postgres") is None, direct
    retained = "CREATE MATERIALIZED VIEW IF NOT EXISTS m WITH (RETAIN HISTORY FOR '1h') AS SELECT 1"
    assert ddl_effect(retained, "postgres") == ({"m"}, set())


def test_duckdb_files_compare_unordered_results_as_multisets(tmp_path):
    folder = tmp_path / "duckdb"
    folder.mkdir()
    (folder / "u.test").write_text(
        "query I\nSELECT 2 UNION ALL SELECT 1\n----\n1\n2\n\n"
        "query I\nSELECT 2 UNION ALL SELECT 1 ORDER BY 1 DESC\n----\n1\n2\n"
    )
    report = run_suite([folder / "u.test"], skips=SkipList())
    assert [o.status for o in report.files[0].outcomes] == ["pass", "fail"]
    assert (
        report.files[0].stats["unordered nosort results compared as multisets (DuckDB files)"] == 1
    )


class SnapshotEngine(DuckDBEngine):
    """A broken adapter: its 'materialized view' is a snapshot that ignores later writes."""

    def create_materialized_view(self, name: str, sql: str, columns: Sequence[str] = ()) -> None:
        self.execute(f"CREATE TABLE {name} AS {sql}")

    def drop_materialized_view(self, name: str) -> None:
        self.execute(f"DROP TABLE IF EXISTS {name}")


INCREMENTAL = """statement ok
CREATE TABLE t(a INTEGER, b INTEGER)

statement ok
INSERT INTO t VALUES (1, 10), (2, 20)

statement ok
UPDATE t SET b = b + 1 WHERE a = 2

query II nosort
SELECT a, b FROM t ORDER BY b DESC
----
2
21
1
10

query I nosort
SELECT a FROM t ORDER BY b
----
1
2

statement ok
DROP TABLE t

statement ok
CREATE TABLE t(a INTEGER, b INTEGER)

statement ok
INSERT INTO t VALUES (5, 50)

query II
SELECT * FROM t
----
5
50
"""


def test_incremental_mode_reads_views_made_before_the_writes(tmp_path):
    report = run_text(tmp_path, INCREMENTAL, "incremental")
    assert statuses(report) == ["pass"] * 9
    assert report.stats == {
        "views created early": 3,
        "views dropped with their relation (pending again)": 1,
        "order read from the view (ORDER BY positions)": 1,
        "order checked by a direct run": 1,
    }


def test_incremental_mode_catches_a_view_that_misses_writes(tmp_path):
    path = tmp_path / "t.test"
    path.write_text(INCREMENTAL)
    report = run_file(str(path), lambda _: SnapshotEngine(), "duckdb", "incremental", SkipList())
    failed = [o.record.location.line for o in report.outcomes if o.status == "fail"]
    assert failed == [10, 18, 33]
    direct = run_file(str(path), lambda _: SnapshotEngine(), "duckdb", "direct", SkipList())
    assert statuses(direct) == ["pass"] * 9


def test_view_creation_errors_fail_the_query(tmp_path):
    text = "statement ok\nCREATE TABLE t(a INT)\n\nquery I\nSELECT a FROM t WHERE\n----\n"
    report = run_text(tmp_path, text, "incremental")
    assert report.outcomes[1].status == "fail"
    assert "query failed" in report.outcomes[1].detail


def test_engine_errors_are_engine_error():
    engine = DuckDBEngine()
    with pytest.raises(EngineError):
        engine.execute("SELECT nope")
    engine.close()


# --- the suites ---------------------------------------------------------------------------


def test_shared_suites_are_present():
    assert SELECT1.is_file(), f"sqllogictest suites missing: {SUITES.resolve()}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("engine", ENGINES)
def test_select1_passes_in_full(engine, mode):
    report = run_suite([SELECT1], engine=engine, mode=mode)
    records = [e for e in parse_file(str(SELECT1)) if isinstance(e, Statement | Query)]
    assert report.failures() == []
    assert report.summary == f"{len(records)} passed, 0 failed, 0 skipped"


# --- dsql on the SQLite suites -------------------------------------------------------------

SQLITE = SUITES / "sqlite"
EVIDENCE = sorted((SQLITE / "evidence").glob("*.test"))
#: What runs in the test process with the dsql engine (local kernel), in both modes:
#: select1, select2 and the evidence files (~2,300 queries per mode).
DSQL_FILES = [SQLITE / "select1.test", SQLITE / "select2.test", *EVIDENCE]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", DSQL_FILES, ids=lambda p: p.name)
def test_dsql_passes_sqlite_suites(path, mode):
    report = run_suite([path], engine="dsql", mode=mode, kernel="local")
    assert report.failures() == []
    assert report.unused_skips == []


#: SQLite's largest files (~6,900 queries and ~1,700 writes per mode): each file and mode
#: runs in background processes (one per chunk of its queries, `jobs_for`) started when the
#: tests are collected (tests/conftest.py, slt/background.py), beside the rest of the
#: suite; these tests run last and wait for them.
BACKGROUND_FILES = [SQLITE / "select5.test", SQLITE / "select3.test", SQLITE / "select4.test"]


@pytest.mark.slt_background
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", BACKGROUND_FILES, ids=lambda p: p.name)
def test_dsql_passes_large_sqlite_suites(path, mode, slt_background):
    """Every record of the file passes, none is skipped: each chunk ran every statement,
    and the chunks' queries are the file's, each checked once."""
    slt_background.widen(2)  # the rest of the suite is done: use both cores
    records = [e for e in parse_file(str(path)) if isinstance(e, Statement | Query)]
    statements = sum(isinstance(e, Statement) for e in records)
    checked: list[int] = []
    for job in jobs_for(path, mode):
        report = slt_background.result(job)
        where = f"{path.name} {mode} chunk {job.chunk or 'all'} ({job.name})"
        assert "error" not in report, f"{where}: {report['error']}"
        assert report["failures"] == [], f"{where}: " + "\n".join(report["failures"])
        assert report["unused_skips"] == [], where
        [lines] = report["query_lines"].values()
        assert report["statements"] == statements, where
        assert (report["passed"], report["skipped"]) == (statements + len(lines), 0), where
        checked += lines
    assert sorted(checked) == [e.location.line for e in records if isinstance(e, Query)]


def test_chunks_deal_out_every_query_once(tmp_path):
    """Chunks run every statement and split the queries; a label's queries share a chunk."""
    text = "statement ok\nCREATE TABLE t(a INTEGER)\n\nstatement ok\nINSERT INTO t VALUES (1)\n\n"
    for k in range(6):
        label = " same" if k in (1, 3) else ""  # dealt as one: 0, (1, 3), 2, 4, 5
        text += f"query I nosort{label}\nSELECT 6 + {k % 2}\n----\n7\n\n" if label else ""
        text += "" if label else f"query I nosort\nSELECT a + {k} FROM t\n----\n{k + 1}\n\n"
    (tmp_path / "c.test").write_text(text)
    queries = [e.location.line for e in parse(text, "c.test") if isinstance(e, Query)]
    checked = []
    for i in (1, 2, 3):
        report = run_suite([tmp_path / "c.test"], mode="incremental", chunk=Chunk(i, 3)).as_json()
        assert (report["failed"], report["statements"], report["chunk"]) == (0, 2, f"{i}/3")
        [lines] = report["query_lines"].values()
        assert (i == 2) == (queries[3] in lines)  # with its label's first query
        assert len(lines) == (2, 3, 1)[i - 1]  # chunk 2: the label pair and query 5
        checked += lines
    assert sorted(checked) == queries


# --- dsql's own .slt files -----------------------------------------------------------------

#: One file per dsql feature (tests/slt/dsql): temporal filters read AS OF, recursion with
#: limits under DML, SUBSCRIBE/FETCH, views over views, outer joins, aggregates, top-k,
#: table functions, CREATE TABLE keys and AS.
DSQL_SLT = sorted((Path(__file__).resolve().parent / "slt" / "dsql").glob("*.slt"))


def test_dsql_slt_files_are_present():
    assert {p.stem for p in DSQL_SLT} >= {"recursion", "subscribe", "temporal", "views"}


@pytest.mark.parametrize("mode", MODES)
def test_dsql_passes_its_own_slt_files(mode):
    report = run_suite(DSQL_SLT, engine="dsql", mode=mode, kernel="local")
    assert report.failures() == []
    assert report.unused_skips == []
    assert report.count("pass") >= 150
    assert SkipList.known_failures(report.skip_reasons()) == 0


# --- dsql on DuckDB's CTE suites -----------------------------------------------------------

#: DuckDB's WITH / WITH RECURSIVE files, `.test_slow` included (~150 records, seconds).
DUCKDB_FILES = sorted((SUITES / "duckdb").glob("*.test*"))


@pytest.mark.parametrize("mode", MODES)
def test_dsql_passes_duckdb_suites(mode):
    """Every record not skipped for a DuckDB-only feature passes; the skipped ones are
    the skip list's classes, and no known dsql bug is among them."""
    report = run_suite(DUCKDB_FILES, engine="dsql", mode=mode, kernel="local")
    assert report.failures() == []
    assert report.unused_skips == []
    reasons = report.skip_reasons()
    assert all(r.startswith("skip list: ") for r in reasons), reasons
    assert report.count("pass") >= 102
    assert SkipList.known_failures(reasons) == 0


def test_cli(tmp_path, capsys):
    (tmp_path / "t.test").write_text(BASIC)
    assert main([str(tmp_path / "t.test"), "--mode", "incremental", "--skips", "none"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("6 passed, 0 failed, 2 skipped")
    (tmp_path / "bad.test").write_text("statement ok\nSELECT nope\n")
    assert main([str(tmp_path / "bad.test"), "--max-failures", "1"]) == 1
