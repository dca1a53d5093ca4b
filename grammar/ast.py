"""The statement AST: one frozen value per dsql statement, queries kept as sqlglot trees.

This is the first IR layer. It says *what* the user asked for (create, insert, read,
subscribe, explain, ...) and nothing about how to compute it; every embedded query or
expression is the tree sqlglot parsed from the statement's text (`read="postgres"`),
untouched. The planner binds those trees against the catalog; this layer knows no
catalog.

Invariants: every statement carries `text` (its source text without the `;`) and
`position` (1-based line and column of its first character in the whole input);
collections are tuples; unquoted names are folded to lower case, quoted names are kept
as written. Example:

>>> from dsql.grammar import parse
>>> (stmt,) = parse("DROP VIEW IF EXISTS v, W CASCADE")
>>> stmt.kind, stmt.names, stmt.if_exists, stmt.cascade
('view', ('v', 'w'), True, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sqlglot import exp

Position = tuple[int, int]


@dataclass(frozen=True, slots=True)
class ColumnDef:
    """A typed column: `name type [NOT NULL] [DEFAULT expr]`."""

    name: str
    type: exp.DataType
    not_null: bool = False
    default: exp.Expression | None = None


@dataclass(frozen=True, slots=True)
class RecursiveBinding:
    """One binding `name (col type, ...) AS (query)` of WITH MUTUALLY RECURSIVE."""

    name: str
    columns: tuple[ColumnDef, ...]
    query: exp.Query | exp.Values


@dataclass(frozen=True, slots=True)
class MutuallyRecursive:
    """A `WITH MUTUALLY RECURSIVE` query (Materialize), which sqlglot cannot parse.

    The bindings may refer to each other and themselves; `body` reads them.
    `limit`/`on_limit` come from `(RETURN | ERROR AT RECURSION LIMIT n)`; both are None
    without that option. Example: `WITH MUTUALLY RECURSIVE (RETURN AT RECURSION LIMIT 5)
    a (n int) AS (SELECT 1 UNION SELECT n + 1 FROM a) SELECT * FROM a`.
    """

    bindings: tuple[RecursiveBinding, ...]
    body: exp.Query | exp.Values
    limit: int | None = None
    on_limit: Literal["error", "return"] | None = None


Query = exp.Query | exp.Values | MutuallyRecursive
"""Any query: a sqlglot query tree (VALUES is `exp.Values`), or a MutuallyRecursive."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Statement:
    """Base of all statements: the source text (without `;`) and where it starts."""

    text: str = field(default="", repr=False, compare=False)
    position: Position = field(default=(1, 1), repr=False, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTable(Statement):
    """`CREATE TABLE [IF NOT EXISTS] name (col type [NOT NULL] [DEFAULT e], ...)`.

    Keys are declared, not enforced: `primary_key` (a column's `PRIMARY KEY` or the
    table's `PRIMARY KEY (a, b)`) makes its columns NOT NULL; `unique` keys are kept.
    """

    name: str
    columns: tuple[ColumnDef, ...]
    if_not_exists: bool = False
    retain_history: str | None = None
    primary_key: tuple[str, ...] = ()
    unique: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTableAs(Statement):
    """`CREATE TABLE [IF NOT EXISTS] name [(col, ...)] AS query`: a table filled once with
    the query's rows, its columns named and typed by the query (or renamed by `columns`)."""

    name: str
    query: exp.Query | exp.Values
    columns: tuple[str, ...] | None = None
    if_not_exists: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Insert(Statement):
    """`INSERT INTO table [(cols)] <VALUES ... | query>`; VALUES is an `exp.Values`."""

    table: str
    columns: tuple[str, ...] | None
    query: exp.Query | exp.Values


@dataclass(frozen=True, slots=True, kw_only=True)
class Update(Statement):
    """`UPDATE table SET col = expr, ... [WHERE cond]`."""

    table: str
    assignments: tuple[tuple[str, exp.Expression], ...]
    where: exp.Expression | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Delete(Statement):
    """`DELETE FROM table [WHERE cond]`."""

    table: str
    where: exp.Expression | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateView(Statement):
    """`CREATE [OR REPLACE] [MATERIALIZED] VIEW [IF NOT EXISTS] name [(cols)]
    [WITH (RETAIN HISTORY FOR 'interval')] AS query`."""

    name: str
    query: Query
    materialized: bool = False
    columns: tuple[str, ...] | None = None
    or_replace: bool = False
    if_not_exists: bool = False
    retain_history: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateIndex(Statement):
    """`CREATE INDEX [IF NOT EXISTS] [name] ON obj (expr, ...)`; `CREATE DEFAULT INDEX ON
    obj` has no keys. Either may end `WITH (RETAIN HISTORY FOR 'interval')`."""

    name: str | None
    on: str
    keys: tuple[exp.Expression, ...]
    if_not_exists: bool = False
    retain_history: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Drop(Statement):
    """`DROP TABLE|VIEW|MATERIALIZED VIEW|INDEX|SOURCE [IF EXISTS] name, ...
    [CASCADE|RESTRICT]`."""

    kind: Literal["table", "view", "materialized view", "index", "source"]
    names: tuple[str, ...]
    if_exists: bool = False
    cascade: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Select(Statement):
    """A one-off read: any query statement, with an optional trailing `AS OF <expr>`."""

    query: Query
    as_of: exp.Expression | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscribe(Statement):
    """`SUBSCRIBE [TO] <name | (query)> [WITH (SNAPSHOT [=] b, PROGRESS [=] b)]
    [AS OF e] [UP TO e]` (DESIGN §2.3). An option left out is None."""

    target: str | Query
    snapshot: bool | None = None
    progress: bool | None = None
    as_of: exp.Expression | None = None
    up_to: exp.Expression | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeclareCursor(Statement):
    """`DECLARE name CURSOR FOR SUBSCRIBE ...`."""

    name: str
    subscribe: Subscribe


@dataclass(frozen=True, slots=True, kw_only=True)
class Fetch(Statement):
    """`FETCH [n | ALL] [FROM] cursor [WITH (timeout = '1s')]`: ALL is None, no count 1."""

    cursor: str
    count: int | None = 1
    timeout: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Close(Statement):
    """`CLOSE cursor`."""

    cursor: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Explain(Statement):
    """`EXPLAIN [RAW|DECORRELATED|OPTIMIZED|PHYSICAL] [PLAN] [WITH (opt, ...)] [FOR] target`.

    `target` is a query, or the name of a view (`VIEW v`, `MATERIALIZED VIEW v`).
    Options are (lower-case name, value) pairs; a bare option has the value "true".
    """

    stage: Literal["raw", "decorrelated", "optimized", "physical"]
    target: Query | str
    options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Show(Statement):
    """`SHOW TABLES | VIEWS | MATERIALIZED VIEWS | INDEXES [ON t] | COLUMNS FROM t |
    ARRANGEMENTS | SUBSCRIPTIONS | CREATE (VIEW|MATERIALIZED VIEW|TABLE|INDEX) name`.

    `what` is the lower-case subject ("create view" for SHOW CREATE VIEW), `of` the
    object the subject is about, if any.
    """

    what: str
    of: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Advance(Statement):
    """`ADVANCE TO <time>` or `ADVANCE BY <interval>`: moves the manual clock.

    Exactly one of `to` and `by` is set.
    """

    to: exp.Expression | None = None
    by: exp.Expression | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Begin(Statement):
    """`BEGIN [TRANSACTION|WORK]` or `START TRANSACTION`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Commit(Statement):
    """`COMMIT [TRANSACTION|WORK]` or `END [TRANSACTION|WORK]`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Rollback(Statement):
    """`ROLLBACK [TRANSACTION|WORK]` or `ABORT`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SetVariable(Statement):
    """`SET [SESSION|LOCAL] name = value` or `... TO value`.

    `value` is the text after `=`/`TO`, stripped; a single string literal gives its
    content (`SET x = 'a b'` has value "a b").
    """

    name: str
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Copy(Statement):
    """`COPY t [(cols)] FROM 'file' | STDIN`, `COPY t [(cols)] | (query) TO 'file' | STDOUT`,
    each `[[WITH] (option value, ...)]`: PostgreSQL's COPY.

    Exactly one of `table` and `query` is set (a query only TO); `path` is None for the
    client (STDIN, STDOUT). `options` are (lower-case name, value) pairs as written
    (a bare option has the value "true"), checked against COPY's options when read.
    `data` is what a client sends after `COPY ... FROM STDIN` (the CLI: the lines up
    to `\\.`); the parser never sets it.
    """

    direction: Literal["from", "to"]
    table: str | None = None
    columns: tuple[str, ...] | None = None
    query: Query | None = None
    path: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    data: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateSource(Statement):
    """`CREATE SOURCE [IF NOT EXISTS] s (col type, ...) FROM FILES 'dir' [WITH (FORMAT =
    'csv', ...)] [KEY (cols) ENVELOPE UPSERT]`: a relation fed by the files that arrive
    in a directory, their records inserted (ENVELOPE NONE, the default) or upserted by
    `key` (`dsql.upsert`).

    `options` are (lower-case name, value) pairs, checked when the source is created;
    `key` is given exactly with ENVELOPE UPSERT.
    """

    name: str
    columns: tuple[ColumnDef, ...]
    location: str
    options: tuple[tuple[str, str], ...] = ()
    key: tuple[str, ...] | None = None
    if_not_exists: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateConnection(Statement):
    """`CREATE CONNECTION [IF NOT EXISTS] c TO POSTGRES (HOST 'h', PORT 5432, USER 'u',
    PASSWORD 'p' | PASSWORD SECRET s, DATABASE 'd')`: where a PostgreSQL source reads and
    a PostgreSQL sink writes (`dsql.pg_source`).

    `options` are (lower-case name, value) pairs, checked when the connection is made;
    `PASSWORD SECRET s` is ("password secret", "s")."""

    name: str
    options: tuple[tuple[str, str], ...] = ()
    if_not_exists: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateSecret(Statement):
    """`CREATE SECRET [IF NOT EXISTS] name AS 'value'`: a value a connection names
    (`PASSWORD SECRET name`) and no SHOW or error message prints (`dsql.pg_source`)."""

    name: str
    value: str = field(repr=False)
    if_not_exists: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DropSecret(Statement):
    """`DROP SECRET [IF EXISTS] name, ...`."""

    names: tuple[str, ...]
    if_exists: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DropConnection(Statement):
    """`DROP CONNECTION [IF EXISTS] c, ...`."""

    names: tuple[str, ...]
    if_exists: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePgSource(Statement):
    """`CREATE SOURCE [IF NOT EXISTS] s FROM POSTGRES CONNECTION c (PUBLICATION 'p')
    FOR TABLES (t1, schema.t2 AS local) | FOR ALL TABLES`: one relation per upstream
    table, kept equal to it by logical replication (`dsql.pg_source`).

    `tables` is ((upstream name, local name or None), ...), or None for ALL TABLES."""

    name: str
    connection: str
    options: tuple[tuple[str, str], ...] = ()
    tables: tuple[tuple[str, str | None], ...] | None = None
    if_not_exists: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateDeltaSource(Statement):
    """`CREATE SOURCE [IF NOT EXISTS] s [(col type, ...)] FROM DELTA 'path'`: a relation
    kept equal to a Delta Lake table, version by version (`dsql.delta_source`); its
    columns are the table's (`columns`, when given, must be them)."""

    name: str
    location: str
    columns: tuple[ColumnDef, ...] | None = None
    if_not_exists: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateSink(Statement):
    """`CREATE SINK [IF NOT EXISTS] name FROM relation INTO FILES | DELTA 'place' [KEY
    (cols)] [WITH (FORMAT = 'parquet')] [ENVELOPE DIFF | UPSERT]` (`dsql.sinks`).

    `target` is "files" (a directory of Parquet files) or "delta" (a Delta Lake table,
    `dsql.delta_sink`); `... INTO POSTGRES CONNECTION c (TABLE 'schema.table') [KEY
    (cols)] [ENVELOPE ...]` (`dsql.pg_sink`) has target "postgres", `connection` set and
    the table as `uri`. `envelope` is "diff" when left out; `key` is given exactly with
    UPSERT."""

    name: str
    source: str
    target: str = "files"
    uri: str
    connection: str | None = None
    key: tuple[str, ...] | None = None
    format: str = "parquet"
    envelope: str = "diff"
    if_not_exists: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DropSink(Statement):
    """`DROP SINK [IF EXISTS] name, ...`."""

    names: tuple[str, ...]
    if_exists: bool = False
