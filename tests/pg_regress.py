"""PostgreSQL's regression scripts as a differential test: each statement run on PostgreSQL
and on dsql, and its two answers classified.

A script of `/work/shared/pg-regress/sql/` is split into statements as psql splits it
(`split`: quotes, `E''` escapes, dollar quotes, nested comments, parentheses, psql's
backslash meta-commands, and the rows of `COPY ... FROM STDIN`). The shared tables that
PostgreSQL's `test_setup.sql` creates are created in both (`load_shared`; the big ones
from `data/*.data`). Then each statement is either skipped by a named rule (`SKIP_RULES`:
outside dsql's scope, or referring to an object a skipped statement would have created)
or run on both sides and given one verdict (`Verdict.kind`):

- `same`: both answered alike: the rows compared as multisets (ordered by the ORDER BY
  keys when the statement has a top-level ORDER BY over output columns), each value as
  PostgreSQL writes it, floats to `FLOAT_DIGITS` significant digits and numerics by
  value (dsql's numeric scale is a documented difference); a write or DDL both ran.
- `refused`: PostgreSQL answered, dsql raised a `DsqlError` in its own words.
- `pg_error`: PostgreSQL raised an error and dsql raised a `DsqlError` too.
- `wrong`: both answered, differently; dsql answered where PostgreSQL raised; dsql
  raised something that is not a `DsqlError`, or a `DsqlError` that leaks the engine's
  message (`LEAKED`).

A write (INSERT, UPDATE, DELETE) dsql refuses is rolled back in PostgreSQL too, so that
both keep the same rows; DDL dsql refuses stays done in PostgreSQL, so that the
statements reading what it made are refused by dsql rather than failing on both.

>>> script = "select 1; -- c;\\nselect ';' as \\"a;\\" \\\\gset\\n\\\\x\\nselect $q$;$q$;"
>>> [s.text for s in split(script)]
['select 1', 'select \\';\\' as "a;"', 'select $q$;$q$']
"""

from __future__ import annotations

import decimal
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REGRESS = Path("/work/shared/pg-regress")

#: Significant digits two floats must agree to (a real's: `REAL_DIGITS`).
FLOAT_DIGITS = 10
REAL_DIGITS = 6

#: A `DsqlError` whose message holds one of these leaked the engine's words.
LEAKED = re.compile(
    r"DuckDB|duckdb|(Parser|Binder|Conversion|Catalog|Invalid Input|Not implemented|INTERNAL"
    r"|Out of Range|Mismatch Type|Invalid Type|Constraint|Dependency) Error|Traceback"
)

#: How long one statement may run in dsql before it counts as refused (a timeout).
STATEMENT_TIMEOUT = "20s"


# --- splitting -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Statement:
    """One statement of a script: its text, its first line, and for `COPY ... FROM STDIN`
    the rows that followed it (each a tuple of column texts, None for NULL)."""

    text: str
    line: int
    copy_rows: tuple[tuple[str | None, ...], ...] | None = None
    psql_variable: bool = False  # the text interpolates a psql variable (`:name`)


_COPY_STDIN = re.compile(r"^\s*copy\s.*\bfrom\s+stdin\b", re.IGNORECASE | re.DOTALL)
_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")
_VARIABLE = re.compile(r":(['\"]?)[A-Za-z_]")


def split(script: str) -> list[Statement]:
    """The statements of a psql script, in order (see the module's docstring)."""
    out: list[Statement] = []
    buf: list[str] = []
    start_line, line = 1, 1
    i, n = 0, len(script)
    depth = 0
    variable = False

    def flush() -> None:
        nonlocal variable
        text = "".join(buf).strip()
        buf.clear()
        if text:
            out.append(Statement(text, start_line, None, variable))
        variable = False

    while i < n:
        c = script[i]
        if not "".join(buf).strip():
            start_line = line
        if c == "\n":
            line += 1
            buf.append(c)
            i += 1
        elif c == "-" and script.startswith("--", i):
            end = script.find("\n", i)
            i = n if end < 0 else end
        elif c == "/" and script.startswith("/*", i):
            level, i = 1, i + 2
            while i < n and level:
                if script.startswith("/*", i):
                    level, i = level + 1, i + 2
                elif script.startswith("*/", i):
                    level, i = level - 1, i + 2
                else:
                    line += script[i] == "\n"
                    i += 1
            buf.append(" ")
        elif c == "'":
            escapes = i > 0 and script[i - 1] in "eE" and not _word_before(script, i - 1)
            j = i + 1
            while j < n:
                if escapes and script[j] == "\\":
                    j += 2
                elif script[j] == "'":
                    if script.startswith("''", j):
                        j += 2
                    else:
                        break
                else:
                    j += 1
            buf.append(script[i : j + 1])
            line += script.count("\n", i, j + 1)
            i = j + 1
        elif c == '"':
            j = i + 1
            while j < n and not (script[j] == '"' and not script.startswith('""', j)):
                j += 2 if script.startswith('""', j) else 1
            buf.append(script[i : j + 1])
            line += script.count("\n", i, j + 1)
            i = j + 1
        elif c == "$" and (m := _DOLLAR.match(script, i)) and not _word_before(script, i):
            end = script.find(m.group(0), m.end())
            j = n if end < 0 else end + len(m.group(0))
            buf.append(script[i:j])
            line += script.count("\n", i, j)
            i = j
        elif c == "\\":
            end = script.find("\n", i)
            end = n if end < 0 else end
            command = script[i + 1 : end].split()
            if command and (command[0].startswith("g") or command[0] == "crosstabview"):
                flush()  # \g, \gset, \gx, \gexec, \crosstabview send the statement
            i = end
        elif c == ":" and _VARIABLE.match(script, i) and script[i - 1] != ":":
            variable = True
            buf.append(c)
            i += 1
        elif c in "()":
            depth += 1 if c == "(" else -1
            buf.append(c)
            i += 1
        elif c == ";" and depth <= 0:
            depth = 0
            text = "".join(buf).strip()
            if _COPY_STDIN.match(text):
                rows, i, line = _copy_rows(script, script.find("\n", i) + 1, line + 1)
                buf.clear()
                out.append(Statement(text, start_line, rows, variable))
                variable = False
                continue
            flush()
            i += 1
        else:
            buf.append(c)
            i += 1
    flush()
    return out


def _word_before(text: str, i: int) -> bool:
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_$")


def _copy_rows(
    script: str, i: int, line: int
) -> tuple[tuple[tuple[str | None, ...], ...], int, int]:
    """The data lines of a `COPY FROM STDIN` starting at `i`, up to the `\\.` line: each
    line's tab-separated fields, `\\N` read as NULL and backslash escapes decoded."""
    rows = []
    while i < len(script):
        end = script.find("\n", i)
        end = len(script) if end < 0 else end
        text, i, line = script[i:end], end + 1, line + 1
        if text == "\\.":
            break
        rows.append(tuple(None if f == "\\N" else _unescape(f) for f in text.split("\t")))
    return tuple(rows), i, line


def _unescape(field_text: str) -> str:
    table = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}
    return re.sub(r"\\(.)", lambda m: table.get(m.group(1), m.group(1)), field_text)


# --- skipping --------------------------------------------------------------------------------

_OUT_OF_SCOPE_KINDS = (
    "function|procedure|aggregate|operator|type|domain|cast|collation|conversion|trigger"
    "|rule|extension|schema|sequence|language|policy|statistics|publication|subscription"
    "|event trigger|access method|text search|foreign|server|user mapping|role|user|group"
)
_CREATE_OBJECT = re.compile(
    r"^\s*create\s+(or\s+replace\s+)?(temp(orary)?\s+)?(unique\s+)?"
    rf"(?P<kind>{_OUT_OF_SCOPE_KINDS}|index)\b(\s+class|\s+family)?"
    r"(\s+concurrently)?(\s+if\s+not\s+exists)?\s+(?P<name>[\w.\"]+)?",
    re.IGNORECASE,
)


def _first_words(text: str, count: int = 2) -> str:
    return " ".join(text.lower().split()[:count])


def _starts(*words: str) -> Callable[[Statement], bool]:
    pattern = re.compile(rf"^\s*({'|'.join(words)})\b", re.IGNORECASE)
    return lambda s: bool(pattern.match(s.text))


#: Each rule: its name and whether it skips a statement (see `skip_rule`).
SKIP_RULES: tuple[tuple[str, Callable[[Statement], bool]], ...] = (
    ("psql variable interpolation (:name)", lambda s: s.psql_variable),
    (
        "DDL of functions, types, operators and other catalog objects",
        lambda s: bool((m := _CREATE_OBJECT.match(s.text)) and m.group("kind").lower() != "index"),
    ),
    (
        "DROP/ALTER of a function, type, operator or other catalog object",
        _starts(rf"(drop|alter)\s+({_OUT_OF_SCOPE_KINDS})", r"comment\s+on"),
    ),
    (
        "index DDL (PostgreSQL access methods: plans only)",
        _starts(r"create\s+(unique\s+)?index", r"drop\s+index", r"reindex", r"cluster"),
    ),
    ("DO block (PL/pgSQL)", _starts("do")),
    ("EXPLAIN (PostgreSQL plans)", _starts("explain")),
    ("SET/RESET/SHOW of a PostgreSQL setting", _starts("set", "reset", "show")),
    ("ANALYZE/VACUUM (statistics)", _starts("analyze", "analyse", "vacuum", "checkpoint")),
    (
        "transaction control",
        _starts(
            "begin",
            "start",
            "commit",
            "rollback",
            "abort",
            "end",
            "savepoint",
            "release",
            "lock",
            "prepare\\s+transaction",
        ),
    ),
    (
        "prepared statements and cursors (protocol)",
        _starts(
            "prepare",
            "execute",
            "deallocate",
            "declare",
            "fetch",
            "move",
            "close",
            "discard",
        ),
    ),
    (
        "COPY to or from a server file or STDOUT",
        lambda s: bool(re.match(r"^\s*copy\b", s.text, re.IGNORECASE)) and s.copy_rows is None,
    ),
    ("GRANT/REVOKE/ownership (privileges)", _starts("grant", "revoke", "reassign", "security")),
    ("LISTEN/NOTIFY", _starts("listen", "notify", "unlisten")),
)


def skip_rule(statement: Statement, skipped: dict[str, str]) -> str | None:
    """The name of the rule that skips `statement`, else None. `skipped` maps the
    (lowercase) names of objects that skipped statements would have created to their
    kind; a skipped statement creating one adds it. A function's name is referred to
    by a call (`name(`), another object's by the name itself."""
    for name, applies in SKIP_RULES:
        if applies(statement):
            created = _CREATE_OBJECT.match(statement.text)
            if created and created.group("name"):
                object_name = created.group("name").strip('"').lower().split(".")[-1]
                skipped[object_name] = created.group("kind").lower()
            return name
    code = _code_only(statement.text).lower()
    words = set(re.findall(r"[a-z_][a-z_0-9]*", code))
    calls = set(re.findall(r"([a-z_][a-z_0-9]*)\s*\(", code))
    used = sorted(
        n for n, kind in skipped.items()
        if n in (calls if kind in ("function", "aggregate", "procedure") else words)
    )  # fmt: skip
    if not used:
        return None
    made = re.match(
        r"^\s*create\s+(or\s+replace\s+)?((temp|temporary|materialized)\s+)?"
        r"(table|view)\s+(if\s+not\s+exists\s+)?([\w\"]+)",
        statement.text,
        re.IGNORECASE,
    )
    if made:
        skipped[made.group(6).strip('"').lower()] = made.group(4).lower()
    return f"refers to {', '.join(used)}, made by a skipped statement"


def _code_only(text: str) -> str:
    """`text` without its string literals (names inside strings are not references)."""
    return re.sub(r"'(?:[^']|'')*'", "''", text)


# --- the shared tables -----------------------------------------------------------------------

_TENK_COLUMNS = (
    "unique1 int4, unique2 int4, two int4, four int4, ten int4, twenty int4, hundred int4, "
    "thousand int4, twothousand int4, fivethous int4, tenthous int4, odd int4, even int4, "
    "stringu1 {name}, stringu2 {name}, string4 {name}"
)

#: The small shared tables of `test_setup.sql`: their DDL and rows, as it writes them.
SMALL_TABLES = (
    "CREATE TABLE char_tbl (f1 char(4))",
    "INSERT INTO char_tbl (f1) VALUES ('a'), ('ab'), ('abcd'), ('abcd    ')",
    "CREATE TABLE float8_tbl (f1 float8)",
    "INSERT INTO float8_tbl (f1) VALUES ('0.0'), ('-34.84'), ('-1004.30'), "
    "('-1.2345678901234e+200'), ('-1.2345678901234e-200')",
    "CREATE TABLE int2_tbl (f1 int2)",
    "INSERT INTO int2_tbl (f1) VALUES ('0   '), ('  1234 '), ('    -1234'), ('32767'), ('-32767')",
    "CREATE TABLE int4_tbl (f1 int4)",
    "INSERT INTO int4_tbl (f1) VALUES ('   0  '), ('123456     '), ('    -123456'), "
    "('2147483647'), ('-2147483647')",
    "CREATE TABLE int8_tbl (q1 int8, q2 int8)",
    "INSERT INTO int8_tbl VALUES ('  123   ','  456'), ('123   ','4567890123456789'), "
    "('4567890123456789','123'), (+4567890123456789,'4567890123456789'), "
    "('+4567890123456789','-4567890123456789')",
    "CREATE TABLE text_tbl (f1 text)",
    "INSERT INTO text_tbl VALUES ('doh!'), ('hi de ho neighbor')",
    "CREATE TABLE varchar_tbl (f1 varchar(4))",
    "INSERT INTO varchar_tbl (f1) VALUES ('a'), ('ab'), ('abcd'), ('abcd    ')",
)

#: The big shared tables: name, the data file their rows come from.
BIG_TABLES = (("onek", "onek"), ("onek2", "onek"), ("tenk1", "tenk"), ("tenk2", "tenk"))


@contextmanager
def holding(pg: Any, database: str, statements: tuple[str, ...]) -> Iterator[tuple[Any, Any]]:
    """A fresh in-process dsql connection and a connection to PostgreSQL's (the `pg`
    fixture's) new database `database`, both after running `statements`."""
    import dsql

    with pg.database(database) as conn:
        con = dsql.connect(kernel="local")
        for sql in statements:
            conn.execute(sql)
            con.execute(sql)
        yield con, conn
        con.close()


def load_shared(con: Any, pg: Any) -> None:
    """The shared tables created and filled in dsql's connection `con` and PostgreSQL's
    `pg` (`name` columns are `text` in dsql, which has no `name` type)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    for sql in SMALL_TABLES:
        pg.execute(sql)
        con.execute(sql)
    columns = [c.split()[0] for c in _TENK_COLUMNS.split(", ")]
    types = {c: pa.int32() for c in columns[:13]} | {c: pa.string() for c in columns[13:]}
    for table, data in BIG_TABLES:
        path = REGRESS / "data" / f"{data}.data"
        pg.execute(f"CREATE TABLE {table} ({_TENK_COLUMNS.format(name='name')})")
        with pg.cursor().copy(f"COPY {table} FROM STDIN") as copy:
            copy.write(path.read_bytes())
        rows = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=columns),
            parse_options=pacsv.ParseOptions(delimiter="\t", quote_char=False),
            convert_options=pacsv.ConvertOptions(column_types=types),
        )
        con.create_table(table, rows)


# --- running and comparing -------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What one statement did on the two sides: `kind` (same, refused, pg_error, skipped,
    wrong) and a note (the skip rule, dsql's error, or the difference)."""

    statement: Statement
    kind: str
    note: str = ""

    def __str__(self) -> str:
        head = " ".join(self.statement.text.split())[:160]
        note = self.note.replace("\n", "\n    ")
        return f"line {self.statement.line}: {self.kind}: {head}\n    {note}"


@dataclass
class Run:
    """A script's verdicts, in statement order."""

    script: str
    verdicts: list[Verdict] = field(default_factory=list)

    def counts(self) -> Counter[str]:
        return Counter(v.kind for v in self.verdicts)

    def summary(self) -> str:
        c = self.counts()
        kinds = ("same", "refused", "pg_error", "skipped", "wrong")
        return f"{self.script}: " + ", ".join(f"{k} {c[k]}" for k in kinds)

    def of(self, kind: str) -> list[Verdict]:
        return [v for v in self.verdicts if v.kind == kind]


def run_script(name: str, con: Any, pg: Any) -> Run:
    """Script `name` (e.g. "case") run statement by statement on dsql's connection `con`
    and PostgreSQL's autocommit connection `pg`, both holding the shared tables."""
    text = (REGRESS / "sql" / f"{name}.sql").read_text()
    run = Run(name)
    skipped: dict[str, str] = {}
    for statement in split(text):
        rule = skip_rule(statement, skipped)
        if rule is not None:
            run.verdicts.append(Verdict(statement, "skipped", rule))
            continue
        for sql in _as_sql(statement):
            run.verdicts.append(judge(Statement(sql, statement.line), con, pg))
    return run


def _as_sql(statement: Statement) -> Iterator[str]:
    """The statement as SQL both sides run: a `COPY FROM STDIN` becomes one INSERT of
    its rows as text literals (each cast by the column's type, as COPY reads them)."""
    if statement.copy_rows is None:
        yield statement.text
        return
    m = re.match(r"^\s*copy\s+([\w.\"]+)\s*(\([^)]*\))?", statement.text, re.IGNORECASE)
    assert m is not None, statement.text
    null = re.search(r"\bnull\s+'([^']*)'", statement.text, re.IGNORECASE)
    marker = null.group(1) if null else None
    rows = ", ".join(
        "(" + ", ".join(_literal(None if v == marker else v) for v in row) + ")"
        for row in statement.copy_rows
    )
    yield f"INSERT INTO {m.group(1)} {m.group(2) or ''} VALUES {rows}"


def _literal(value: str | None) -> str:
    return "NULL" if value is None else "'" + value.replace("'", "''") + "'"


_WRITE = re.compile(r"^\s*(with\b.*\b)?(insert|update|delete|merge|truncate)\b", re.I | re.S)


def judge(statement: Statement, con: Any, pg: Any) -> Verdict:
    """One statement run on both sides and classified (see the module's docstring)."""
    import psycopg

    from dsql.errors import DsqlError

    sql = statement.text
    refusal: str | None = None
    try:
        with pg.transaction() as tx:
            cur = pg.execute(sql)
            want = _pg_table(pg, cur) if cur.description is not None else None
            try:
                got = con.execute(sql)
                mine = got.arrow() if got.description is not None else None
            except DsqlError as error:
                refusal = str(error)
                if _WRITE.match(sql) and not LEAKED.search(refusal):
                    raise psycopg.Rollback(tx) from None  # keep both sides' rows alike
            except Exception as error:  # noqa: BLE001 - a crash is a wrong answer
                return Verdict(statement, "wrong", f"{type(error).__name__}: {error}")
    except psycopg.Error as error:
        return _after_pg_error(statement, con, error)
    if refusal is not None:
        if LEAKED.search(refusal):
            return Verdict(statement, "wrong", f"engine message: {refusal}")
        return Verdict(statement, "refused", refusal)
    if want is None and mine is None:
        return Verdict(statement, "same")
    if want is None or mine is None:
        return Verdict(statement, "wrong", "one side returned rows, the other did not")
    difference = compare(sql, mine, *want)
    return Verdict(statement, "wrong" if difference else "same", difference or "")


def _after_pg_error(statement: Statement, con: Any, error: Exception) -> Verdict:
    from dsql.errors import DsqlError

    try:
        got = con.execute(statement.text)
        rows = got.fetchall() if got.description is not None else "(no rows)"
    except DsqlError as refusal:
        message = str(refusal)
        if LEAKED.search(message):
            return Verdict(statement, "wrong", f"engine message: {message}")
        return Verdict(statement, "pg_error", f"postgres: {error}\n  dsql: {message}")
    except Exception as crash:  # noqa: BLE001 - a crash is a wrong answer
        return Verdict(statement, "wrong", f"{type(crash).__name__}: {crash}")
    return Verdict(
        statement, "wrong", f"postgres raised: {str(error).strip()}\n  dsql answered {rows!r:.300}"
    )


def _pg_table(pg: Any, cur: Any) -> tuple[list[tuple[str | None, ...]], list[str], list[str]]:
    """PostgreSQL's rows as it writes each value (None for NULL), its column types and
    names."""
    result = cur.pgresult
    info = pg.adapters.types
    types = []
    for d in cur.description:
        t = info.get(d.type_code)  # an array's oid finds its element's info
        name = str(d.type_code) if t is None else t.name
        types.append("_" + name if t is not None and d.type_code == t.array_oid else name)
    rows = [
        tuple(
            None if result.get_value(r, c) is None else bytes(result.get_value(r, c)).decode()
            for c in range(result.nfields)
        )
        for r in range(result.ntuples)
    ]
    return rows, types, [d.name for d in cur.description]


def dsql_texts(table: Any) -> list[tuple[str | None, ...]]:
    """dsql's rows as the plain format writes each value (None for NULL)."""
    from dsql.printer import column_texts

    columns = []
    for column in table.columns:
        texts = column_texts(column)
        nulls = column.is_null().to_pylist()
        columns.append([None if null else t for t, null in zip(texts, nulls, strict=True)])
    return list(zip(*columns, strict=True)) if columns else [() for _ in range(table.num_rows)]


_FAMILIES = {
    "int2": "integer", "int4": "integer", "int8": "integer", "numeric": "numeric",
    "float4": "float", "float8": "float", "bool": "bool", "text": "text", "varchar": "text",
    "bpchar": "text", "name": "text", "date": "date", "timestamp": "timestamp",
    "timestamptz": "timestamp", "interval": "interval",
}  # fmt: skip


def _family(arrow_type: Any) -> str | None:
    import pyarrow as pa

    checks = (
        (pa.types.is_integer, "integer"), (pa.types.is_decimal, "numeric"),
        (pa.types.is_floating, "float"), (pa.types.is_boolean, "bool"),
        (pa.types.is_string, "text"), (pa.types.is_large_string, "text"),
        (pa.types.is_date, "date"), (pa.types.is_timestamp, "timestamp"),
        (pa.types.is_interval, "interval"),
    )  # fmt: skip
    return next((name for check, name in checks if check(arrow_type)), None)


def canonical(text: str | None, pg_type: str) -> Any:
    """A value's text as compared: floats rounded, numerics (and numeric arrays) by
    value, the rest as is.

    >>> canonical("{1.10,2,NULL}", "_numeric") == canonical("{1.1,2.0,NULL}", "_numeric")
    True
    """
    if text is None:
        return None
    if pg_type in ("float4", "float8"):
        try:
            value = float(text)
        except ValueError:
            return text
        if math.isnan(value) or math.isinf(value):
            return text
        digits = REAL_DIGITS if pg_type == "float4" else FLOAT_DIGITS
        return float(f"{value:.{digits}g}")
    if pg_type == "numeric":
        try:
            return decimal.Decimal(text).normalize()
        except decimal.InvalidOperation:
            return text
    if pg_type == "_numeric" and re.fullmatch(r"\{[-+0-9.eE,NUL]*\}", text):
        elements = text[1:-1].split(",") if text != "{}" else []
        return tuple(canonical(None if v == "NULL" else v, "numeric") for v in elements)
    return text


def compare(
    sql: str, mine: Any, want: list[tuple[str | None, ...]], types: list[str], names: list[str]
) -> str | None:
    """None when dsql's Arrow result `mine` holds PostgreSQL's rows `want` (its column
    `types` and `names`), else the difference."""
    if mine.num_columns != len(types):
        return f"dsql returns {mine.num_columns} columns, postgres {len(types)}"
    for column, pg_type, name in zip(mine.columns, types, names, strict=True):
        family = _FAMILIES.get(pg_type)
        if family is not None and mine.num_rows and _family(column.type) not in (family, None):
            return f"column {name}: dsql type {column.type}, postgres {pg_type}"
    got = [tuple(canonical(v, t) for v, t in zip(r, types, strict=True)) for r in dsql_texts(mine)]
    exp = [tuple(canonical(v, t) for v, t in zip(r, types, strict=True)) for r in want]
    if Counter(map(_key, got)) != Counter(map(_key, exp)):
        return _difference(got, exp)
    keys = order_keys(sql, names)
    if keys and [tuple(r[k] for k in keys) for r in got] != [
        tuple(r[k] for k in keys) for r in exp
    ]:
        return f"rows in another order\n  dsql {got[:20]}\n  postgres {exp[:20]}"
    return None


def _key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((type(v).__name__, v) for v in row)


def _difference(got: list[tuple[Any, ...]], exp: list[tuple[Any, ...]]) -> str:
    a, b = Counter(map(_key, got)), Counter(map(_key, exp))
    extra = [tuple(v for _, v in r) for r in (a - b).elements()]
    missing = [tuple(v for _, v in r) for r in (b - a).elements()]
    return (
        f"dsql {len(got)} rows, postgres {len(exp)}\n  only in dsql {extra[:8]!r:.600}"
        f"\n  only in postgres {missing[:8]!r:.600}"
    )


def order_keys(sql: str, names: list[str]) -> list[int]:
    """The positions of the output columns a statement's top-level ORDER BY sorts by,
    when every key is an output column (by name or number); else [] (compared as a
    multiset). A LIMIT makes the order unchecked too: ties at its edge may differ."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="postgres")
    except Exception:  # noqa: BLE001 - a statement sqlglot cannot read: unordered
        return []
    order = tree.args.get("order")
    if not isinstance(order, exp.Order) or tree.args.get("limit") or tree.args.get("offset"):
        return []
    lowered = [n.lower() for n in names]
    keys = []
    for ordered in order.expressions:
        key = ordered.this
        if isinstance(key, exp.Literal) and key.is_int and 0 < int(key.name) <= len(names):
            keys.append(int(key.name) - 1)
        elif isinstance(key, exp.Column) and not key.table and lowered.count(key.name.lower()) == 1:
            keys.append(lowered.index(key.name.lower()))
        else:
            return []
    return keys


SCRIPTS = (
    "aggregates", "arrays", "case", "interval", "jsonb", "select_distinct",
    "select_distinct_on", "window",
)  # fmt: skip


def main() -> None:
    """Run every script (or those named on the command line) against a private
    PostgreSQL and print each one's summary and its wrong statements."""
    import shutil
    import sys
    import tempfile

    from pg_oracle import PgServer

    import dsql

    root = Path(tempfile.mkdtemp(prefix="dsql-pg-regress-"))
    server = PgServer.start(root)
    try:
        for name in sys.argv[1:] or SCRIPTS:
            with server.database(f"regress_{name}") as pg:
                con = dsql.connect(kernel="local")
                con.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
                pg.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
                load_shared(con, pg)
                run = run_script(name, con, pg)
                con.close()
            print(run.summary())
            for verdict in run.of("wrong"):
                print("  " + str(verdict).replace("\n", "\n  "))
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
