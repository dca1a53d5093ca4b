"""`parse`: dsql statement text to the statement AST (`ast.py`).

The input is split at top-level `;` (`source.py`); each statement's masked text is
parsed by the LALR grammar in `statements.lark`; `_Builder`, a lark Transformer, turns
the tree into AST values. A GROUP token (an opaque `( ... )`) is parsed again, as its
own fragment, by the start symbol that knows what it holds (`query`, `names`, `options`,
`recursion_limit`), and query/expression text goes to sqlglot (`sql.py`).

>>> [type(s).__name__ for s in parse("BEGIN; INSERT INTO t VALUES (1); COMMIT")]
['Begin', 'Insert', 'Commit']
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedInput, VisitError
from lark.tree import Meta
from sqlglot import exp

from dsql.errors import DsqlError
from dsql.grammar import ast
from dsql.grammar.diagnostics import syntax_error
from dsql.grammar.keywords import is_reserved, reserved_message
from dsql.grammar.source import Fragment, Source
from dsql.grammar.sql import (
    parse_columns,
    parse_expression,
    parse_expressions,
    parse_query,
    parse_table_elements,
    string_value,
)

_STARTS = ["statement", "query", "names", "options", "table_refs", "recursion_limit"]
_ONE_STRING = re.compile("'\x01*'\\s*")
_TRUE = frozenset({"true", "on", "t", "yes", "1"})
_FALSE = frozenset({"false", "off", "f", "no", "0"})


def parse(text: str) -> tuple[ast.Statement, ...]:
    """All statements in `text`, in order; raises `ParseError` (with position) otherwise.

    Statements are separated by `;` (the last one optional); `--` and `/* */` comments
    are allowed anywhere; an input of only comments has no statements.
    """
    surrogate = _SURROGATE.search(text)
    if surrogate is not None:  # no engine can encode it (a Python str may still hold one)
        printable = text.encode("utf-8", "replace").decode("utf-8")  # the error prints it
        raise Source(printable).error(
            "the text has a lone UTF-16 surrogate, which is not a character",
            surrogate.start(),
            None,
            "decode the input as UTF-8 (errors='replace') before running it",
        )
    nul = text.find("\x00")
    if nul >= 0:  # PostgreSQL refuses it too; here it would also read as a masked group
        raise Source(text.replace("\x00", " ")).error(
            "the text has a NUL character (\\0), which query text cannot hold",
            nul,
            None,
            "remove it; pass binary data as a bytes parameter (execute(sql, (b'...',)))",
        )
    return tuple(_parse_fragment(f, "statement") for f in Source(text).statements())


_SURROGATE = re.compile("[\ud800-\udfff]")


@cache
def _lark() -> Lark:
    grammar = resources.files("dsql.grammar").joinpath("statements.lark").read_text("utf-8")
    return Lark(
        grammar,
        parser="lalr",
        lexer="contextual",
        start=_STARTS,
        propagate_positions=True,
        maybe_placeholders=True,
    )


def _parse_fragment(fragment: Fragment, start: str) -> Any:
    """The value of `fragment` read as the grammar's `start` symbol."""
    try:
        tree = _lark().parse(fragment.masked, start=start)
    except UnexpectedInput as e:
        raise syntax_error(fragment, e, start) from None
    try:
        return _Builder(fragment).transform(tree)
    except VisitError as e:
        if isinstance(e.orig_exc, DsqlError):  # a parse error, or a literal's value
            raise e.orig_exc from None
        raise


@dataclass(frozen=True, slots=True)
class _Option:
    """One `WITH (...)` option: its words, its value if given, and where it starts."""

    words: tuple[str, ...]
    value: str | None
    offset: int


@v_args(inline=True, meta=True)
class _Builder(Transformer):
    """Turns one fragment's parse tree into AST values; token offsets are fragment-relative."""

    def __init__(self, fragment: Fragment) -> None:
        super().__init__()
        self.fragment = fragment

    # ---- helpers ------------------------------------------------------------------------
    def _at(self, item: Token | Meta) -> int:
        """The absolute offset of a token or a rule's first character."""
        return self.fragment.start + (item.start_pos or 0)

    def _text(self, token: Token) -> str:
        """A token's original text (the masked token has the same span)."""
        start = self._at(token)
        return self.fragment.source.text[start : start + len(token)].rstrip()

    def _located(self, meta: Meta) -> dict[str, Any]:
        """`text` and `position` of the statement spanning `meta`."""
        start, end = self._at(meta), self.fragment.start + meta.end_pos
        return {
            "text": self.fragment.slice(start, end),
            "position": self.fragment.source.position(start),
        }

    def _inside(self, group: Token, start: str) -> Any:
        """The value of a GROUP token's inside, read as `start`."""
        return _parse_fragment(self.fragment.inside(self._at(group)), start)

    def _query(self, token: Token) -> exp.Query | exp.Values:
        return parse_query(self.fragment, self._text(token), self._at(token))

    def _expression(self, token: Token) -> exp.Expression:
        return parse_expression(self.fragment, self._text(token), self._at(token))

    def _options(self, group: Token | None) -> tuple[_Option, ...]:
        return () if group is None else self._inside(group, "options")

    # ---- names and options --------------------------------------------------------------
    def ident(self, meta: Meta, token: Token) -> str:
        if token.type == "QUOTED_NAME":
            return self._text(token)[1:-1].replace('""', '"')
        if is_reserved(str(token)):
            raise self.fragment.error_at(self._at(token), *reserved_message(self._text(token)))
        return str(token).lower()

    def name(self, meta: Meta, *idents: str) -> str:
        return ".".join(idents)

    def names(self, meta: Meta, *names: str) -> tuple[str, ...]:
        return names

    def options(self, meta: Meta, *options: _Option) -> tuple[_Option, ...]:
        return options

    def option_words(self, meta: Meta, *words: Token) -> _Option:
        return _Option(tuple(w.lower() for w in words), None, self._at(meta))

    def option_value(self, meta: Meta, *children: Token | None) -> _Option:
        *words, value = [c for c in children if c is not None]
        text = string_value(self._text(value)) if value.type == "STRING" else value.lower()
        return _Option(tuple(w.lower() for w in words), text, self._at(meta))

    def recursion_limit(self, meta: Meta, *children: Token | None) -> tuple[int, str]:
        *keywords, limit = [c for c in children if c is not None]
        on = "return" if any(k.type == "RETURN" for k in keywords) else "error"
        return int(limit), on

    # ---- statements ---------------------------------------------------------------------
    def create_table(
        self, meta, _c, _temp, _t, if_not_exists, name, group, _with, options
    ) -> ast.CreateTable:
        table = parse_table_elements(self.fragment, self._text(group), self._at(group))
        return ast.CreateTable(
            name=name,
            columns=table.columns,
            primary_key=table.primary_key,
            unique=table.unique,
            if_not_exists=bool(if_not_exists),
            retain_history=self._retain_history(options, "CREATE TABLE"),
            **self._located(meta),
        )

    def create_table_as(
        self, meta, _c, _temp, _t, if_not_exists, name, columns, _as, query
    ) -> ast.CreateTableAs:
        return ast.CreateTableAs(
            name=name,
            query=query,
            columns=None if columns is None else self._inside(columns, "names"),
            if_not_exists=bool(if_not_exists),
            **self._located(meta),
        )

    def create_view(
        self,
        meta,
        _c,
        or_replace,
        _temp,
        materialized,
        _v,
        if_not_exists,
        name,
        columns,
        _with,
        options,
        _as,
        query,
    ) -> ast.CreateView:
        if options is not None and materialized is None:
            raise self.fragment.error_at(
                self._at(options),
                "a view keeps no history: WITH (...) needs a materialized view",
                "write CREATE MATERIALIZED VIEW ... WITH (RETAIN HISTORY FOR '1h') AS ...",
            )
        return ast.CreateView(
            name=name,
            query=query,
            materialized=materialized is not None,
            columns=None if columns is None else self._inside(columns, "names"),
            or_replace=bool(or_replace),
            if_not_exists=bool(if_not_exists),
            retain_history=self._retain_history(options, "CREATE MATERIALIZED VIEW"),
            **self._located(meta),
        )

    def create_index(
        self, meta, _c, _i, if_not_exists, name, _on, on, group, _with, options
    ) -> ast.CreateIndex:
        inside = self.fragment.inside(self._at(group))
        keys = parse_expressions(self.fragment, inside.text, inside.start)
        return ast.CreateIndex(
            name=name,
            on=on,
            keys=keys,
            if_not_exists=bool(if_not_exists),
            retain_history=self._retain_history(options, "CREATE INDEX"),
            **self._located(meta),
        )

    def create_default_index(
        self, meta, _c, _d, _i, if_not_exists, _on, on, _with, options
    ) -> ast.CreateIndex:
        return ast.CreateIndex(
            name=None,
            on=on,
            keys=(),
            if_not_exists=bool(if_not_exists),
            retain_history=self._retain_history(options, "CREATE INDEX"),
            **self._located(meta),
        )

    def _retain_history(self, group: Token | None, statement: str) -> str | None:
        """The interval of `WITH (RETAIN HISTORY [=] FOR '<interval>')`, the only option
        of CREATE TABLE, MATERIALIZED VIEW and INDEX (Materialize's); None without it."""
        retain = None
        for option in self._options(group):
            if option.words != ("retain", "history", "for") or option.value is None:
                raise self.fragment.error_at(
                    option.offset,
                    f"unknown {statement} option {' '.join(option.words).upper()!r}",
                    f"{statement} takes WITH (RETAIN HISTORY FOR '<interval>'), "
                    "e.g. '1h' or '30 minutes'",
                )
            retain = option.value
        return retain

    def copy_table(self, meta, table, columns) -> tuple[str, tuple[str, ...] | None]:
        return table, None if columns is None else self._inside(columns, "names")

    def copy_query(self, meta, group: Token) -> ast.Query:
        return self._inside(group, "query")

    def copy_target(self, meta, *tokens: Token) -> str | None:
        if tokens[0].type == "PROGRAM":
            raise self.fragment.error_at(
                self._at(tokens[0]),
                "COPY ... PROGRAM is not supported: dsql runs no commands",
                "name a file, or use STDIN / STDOUT",
            )
        return string_value(self._text(tokens[0])) if tokens[0].type == "STRING" else None

    def copy(self, meta, _c, subject, direction, path, _with, group) -> ast.Copy:
        if not isinstance(subject, tuple) and direction.type == "FROM":
            raise self.fragment.error_at(
                self._at(direction),
                "COPY FROM needs a table, not a query",
                "write COPY t [(a, b)] FROM ...",
            )
        options = tuple(_option_pair(o) for o in self._options(group))
        table, columns = subject if isinstance(subject, tuple) else (None, None)
        return ast.Copy(
            direction="from" if direction.type == "FROM" else "to",
            table=table,
            columns=columns,
            query=None if isinstance(subject, tuple) else subject,
            path=path,
            options=options,
            **self._located(meta),
        )

    def create_source(
        self,
        meta,
        _c,
        _s,
        if_not_exists,
        name,
        group,
        _from,
        _files,
        location,
        _with,
        options,
        key,
        envelope,
    ) -> ast.CreateSource:
        self._check_key(meta, key, envelope, "to insert every record")
        return ast.CreateSource(
            name=name,
            columns=parse_columns(self.fragment, self._text(group), self._at(group)),
            location=string_value(self._text(location)),
            options=tuple(_option_pair(o) for o in self._options(options)),
            key=key,
            if_not_exists=bool(if_not_exists),
            **self._located(meta),
        )

    def source_envelope(self, meta, _e, word: Token) -> str:
        return self._envelope(
            word,
            "source",
            ("none", "upsert"),
            "write ENVELOPE NONE (every record inserted) or KEY (k) ENVELOPE UPSERT",
        )

    def _check_key(self, meta, key: object, envelope: str | None, otherwise: str) -> None:
        """A ParseError unless KEY is given exactly with ENVELOPE UPSERT."""
        if (envelope == "upsert") != (key is not None):
            raise self.fragment.error_at(
                self._at(meta),
                "ENVELOPE UPSERT needs KEY (columns), and KEY goes only with it",
                f"write KEY (k) ... ENVELOPE UPSERT, or neither {otherwise}",
            )

    def _envelope(self, word: Token, what: str, kinds: tuple[str, ...], hint: str) -> str:
        """The envelope `word` names, lower-case; a ParseError at it if not one of `kinds`."""
        kind = word.lower()
        if kind not in kinds:
            raise self.fragment.error_at(self._at(word), f"unknown {what} envelope {kind!r}", hint)
        return kind

    def insert(self, meta, _i, _into, table, columns, query) -> ast.Insert:
        names = None if columns is None else self._inside(columns, "names")
        return ast.Insert(
            table=table, columns=names, query=self._query(query), **self._located(meta)
        )

    def assignment(self, meta, column, value) -> tuple[str, exp.Expression]:
        return column, self._expression(value)

    def update(self, meta, _u, table, _set, *rest) -> ast.Update:
        *assignments, _where, where = rest
        return ast.Update(
            table=table,
            assignments=tuple(assignments),
            where=None if where is None else self._expression(where),
            **self._located(meta),
        )

    def delete(self, meta, _d, _from, table, _where, where) -> ast.Delete:
        condition = None if where is None else self._expression(where)
        return ast.Delete(table=table, where=condition, **self._located(meta))

    def drop_kind(self, meta, *keywords: Token) -> str:
        return "index" if keywords[-1].type == "INDEX" else keywords[-1].lower()

    def drop(self, meta, _d, kind, if_exists, *rest) -> ast.Drop:
        *names, behavior = rest
        return ast.Drop(
            kind=kind,
            names=tuple(names),
            if_exists=bool(if_exists),
            cascade=behavior == "cascade",
            **self._located(meta),
        )

    def drop_behavior(self, meta, keyword: Token) -> str:
        return keyword.lower()

    def if_exists(self, meta, *_: Token) -> bool:
        return True

    if_not_exists = or_replace = if_exists

    def select(self, meta, query, as_of) -> ast.Select:
        return ast.Select(query=query, as_of=as_of, **self._located(meta))

    def as_of(self, meta, _as, _of, expr) -> exp.Expression:
        return self._expression(expr)

    def up_to(self, meta, _up, _to, expr) -> exp.Expression:
        return self._expression(expr)

    def subquery(self, meta, group: Token) -> ast.Query:
        return self._inside(group, "query")

    def subscribe(self, meta, _s, _to, target, _with, group, as_of, up_to) -> ast.Subscribe:
        settings: dict[str, bool] = {}
        for option in self._options(group):
            name, value = _option_pair(option)
            if name not in {"snapshot", "progress"}:
                raise self.fragment.error_at(
                    option.offset,
                    f"unknown SUBSCRIBE option {name!r}",
                    "SUBSCRIBE takes WITH (SNAPSHOT = true|false, PROGRESS = true|false)",
                )
            settings[name] = self._boolean(option, value)
        return ast.Subscribe(
            target=target,
            snapshot=settings.get("snapshot"),
            progress=settings.get("progress"),
            as_of=as_of,
            up_to=up_to,
            **self._located(meta),
        )

    def _boolean(self, option: _Option, value: str) -> bool:
        if value in _TRUE | _FALSE:
            return value in _TRUE
        raise self.fragment.error_at(
            option.offset,
            f"option {option.words[0]} needs a boolean, not {value!r}",
            "write true or false",
        )

    def declare(self, meta, _d, name, _c, _f, subscribe) -> ast.DeclareCursor:
        return ast.DeclareCursor(name=name, subscribe=subscribe, **self._located(meta))

    def fetch_count(self, meta, *children: Token | None) -> tuple[int | None]:
        last = [c for c in children if c is not None][-1]
        return (int(last) if last.type == "INT" else None if last.type == "ALL" else 1,)

    def fetch_from(self, meta, keyword: Token) -> None:
        return None

    def fetch(self, meta, _f, count, _from, cursor, _with, group) -> ast.Fetch:
        timeout = None
        for option in self._options(group):
            name, value = _option_pair(option)
            if name != "timeout":
                raise self.fragment.error_at(
                    option.offset,
                    f"unknown FETCH option {name!r}",
                    "FETCH takes WITH (timeout = '1s')",
                )
            timeout = value
        return ast.Fetch(
            cursor=cursor,
            count=1 if count is None else count[0],
            timeout=timeout,
            **self._located(meta),
        )

    def close(self, meta, _c, cursor) -> ast.Close:
        return ast.Close(cursor=cursor, **self._located(meta))

    def explain_stage(self, meta, keyword: Token) -> str:
        return keyword.lower()

    def explain_view(self, meta, _m, _v, name) -> str:
        return name

    def explain(self, meta, _e, stage, _plan, _with, group, _as, _text, _for, target):
        options = tuple((" ".join(o.words), o.value or "true") for o in self._options(group))
        return ast.Explain(
            stage=stage or "optimized", target=target, options=options, **self._located(meta)
        )

    def show_subject(self, meta, *keywords: Token) -> str:
        what = " ".join(k.lower() for k in keywords)
        return "indexes" if what == "index" else what

    def show_of(self, meta, _preposition, name) -> str:
        return name

    def show(self, meta, _s, what, of) -> ast.Show:
        if what == "columns" and of is None:
            raise self.fragment.error_at(
                self.fragment.statement[1],
                "SHOW COLUMNS needs a table or view",
                "write SHOW COLUMNS FROM name",
            )
        if what not in {"columns", "indexes"} and of is not None:
            raise self.fragment.error_at(
                self._at(meta),
                f"SHOW {what.upper()} takes no FROM or ON",
                f"write SHOW {what.upper()}",
            )
        return ast.Show(what=what, of=of, **self._located(meta))

    def show_kind(self, meta, *keywords: Token) -> str:
        return " ".join(k.lower() for k in keywords)

    def show_create(self, meta, _s, _c, kind, name) -> ast.Show:
        return ast.Show(what=f"create {kind}", of=name, **self._located(meta))

    def create_sink(
        self,
        meta,
        _c,
        _s,
        if_not_exists,
        name,
        _f,
        source,
        _i,
        into,
        uri,
        key,
        _w,
        group,
        envelope,
    ) -> ast.CreateSink:
        settings: dict[str, str] = {}
        for option in self._options(group):
            option_name, value = _option_pair(option)
            if option_name != "format":
                raise self.fragment.error_at(
                    option.offset,
                    f"unknown CREATE SINK option {option_name!r}",
                    "CREATE SINK takes WITH (FORMAT = 'parquet')",
                )
            settings[option_name] = value.lower()
        kind = envelope or "diff"
        self._check_key(meta, key, kind, "for the diff envelope")
        return ast.CreateSink(
            name=name,
            source=source,
            target=into,
            uri=string_value(self._text(uri)),
            key=key,
            format=settings.get("format", "parquet"),
            envelope=kind,
            if_not_exists=bool(if_not_exists),
            **self._located(meta),
        )

    def sink_kind(self, meta, word: Token) -> str:
        return word.type.lower()

    def create_pg_sink(
        self, meta, _c, _s, if_not_exists, name, _f, source, _i, _pg, _conn, connection, group,
        key, envelope,
    ) -> ast.CreateSink:  # fmt: skip
        settings = dict(_option_pair(o) for o in self._options(group))
        unknown = sorted(set(settings) - {"table"})
        if unknown or "table" not in settings:
            raise self.fragment.error_at(
                self._at(meta),
                f"unknown CREATE SINK ... INTO POSTGRES option {unknown[0]!r}"
                if unknown
                else "CREATE SINK ... INTO POSTGRES needs (TABLE 'schema.table')",
                "write INTO POSTGRES CONNECTION c (TABLE 'schema.table')",
            )
        kind = envelope or "diff"
        self._check_key(meta, key, kind, "for the diff envelope")
        return ast.CreateSink(
            name=name,
            source=source,
            target="postgres",
            uri=settings["table"],
            connection=connection,
            key=key,
            envelope=kind,
            if_not_exists=bool(if_not_exists),
            **self._located(meta),
        )

    def sink_key(self, meta, _k, group) -> tuple[str, ...]:
        return tuple(self._inside(group, "names"))

    def sink_envelope(self, meta, _e, word: Token) -> str:
        return self._envelope(
            word,
            "sink",
            ("diff", "upsert"),
            "write ENVELOPE DIFF (mz_timestamp, mz_diff, columns) or ENVELOPE UPSERT",
        )

    def drop_sink(self, meta, _d, _s, if_exists, *names: str) -> ast.DropSink:
        return ast.DropSink(names=tuple(names), if_exists=bool(if_exists), **self._located(meta))

    def create_connection(
        self, meta, _c, _conn, if_not_exists, name, _to, _pg, group
    ) -> ast.CreateConnection:
        options = []
        for o in self._options(group):
            if [w.lower() for w in o.words[:2]] == ["password", "secret"] and len(o.words) == 3:
                options.append(("password secret", o.words[2]))  # PASSWORD SECRET name
            else:
                options.append(_option_pair(o))
        return ast.CreateConnection(
            name=name,
            options=tuple(options),
            if_not_exists=bool(if_not_exists),
            **self._located(meta),
        )

    def drop_connection(self, meta, _d, _c, if_exists, *names: str) -> ast.DropConnection:
        return ast.DropConnection(
            names=tuple(names), if_exists=bool(if_exists), **self._located(meta)
        )

    def create_secret(self, meta, _c, _s, if_not_exists, name, _as, value) -> ast.CreateSecret:
        return ast.CreateSecret(
            name=name,
            value=string_value(self._text(value)),
            if_not_exists=bool(if_not_exists),
            **self._located(meta),
        )

    def drop_secret(self, meta, _d, _s, if_exists, *names: str) -> ast.DropSecret:
        return ast.DropSecret(names=tuple(names), if_exists=bool(if_exists), **self._located(meta))

    def show_secrets(self, meta, *_: Token) -> ast.Show:
        return ast.Show(what="secrets", **self._located(meta))

    def show_connections(self, meta, *_: Token) -> ast.Show:
        return ast.Show(what="connections", **self._located(meta))

    def create_pg_source(
        self, meta, _c, _s, if_not_exists, name, _f, _pg, _conn, connection, group, _for, tables
    ) -> ast.CreatePgSource:
        return ast.CreatePgSource(
            name=name,
            connection=connection,
            options=tuple(_option_pair(o) for o in self._options(group)),
            tables=tables,
            if_not_exists=bool(if_not_exists),
            **self._located(meta),
        )

    def create_delta_source(
        self, meta, _c, _s, if_not_exists, name, group, _f, _delta, location
    ) -> ast.CreateDeltaSource:
        return ast.CreateDeltaSource(
            name=name,
            columns=None
            if group is None
            else parse_columns(self.fragment, self._text(group), self._at(group)),
            location=string_value(self._text(location)),
            if_not_exists=bool(if_not_exists),
            **self._located(meta),
        )

    def pg_some_tables(self, meta, _t, group) -> tuple[tuple[str, str | None], ...]:
        return tuple(self._inside(group, "table_refs"))

    def pg_all_tables(self, meta, *_: Token) -> None:
        return None

    def table_refs(self, meta, *refs: tuple[str, str | None]) -> tuple[tuple[str, str | None], ...]:
        return refs

    def table_ref(self, meta, upstream: str, _as, local: str | None) -> tuple[str, str | None]:
        return upstream, local

    def show_sinks(self, meta, *_: Token) -> ast.Show:
        return ast.Show(what="sinks", **self._located(meta))

    def advance_to(self, meta, _a, _to, expr) -> ast.Advance:
        return ast.Advance(to=self._expression(expr), **self._located(meta))

    def advance_by(self, meta, _a, _by, expr) -> ast.Advance:
        return ast.Advance(by=self._expression(expr), **self._located(meta))

    def begin(self, meta, *_: Token | None) -> ast.Begin:
        return ast.Begin(**self._located(meta))

    def commit(self, meta, *_: Token | None) -> ast.Commit:
        return ast.Commit(**self._located(meta))

    def rollback(self, meta, *_: Token | None) -> ast.Rollback:
        return ast.Rollback(**self._located(meta))

    def set_variable(self, meta, _set, _scope, name, *rest) -> ast.SetVariable:
        value = rest[-1]
        text = self._text(value)
        if _ONE_STRING.fullmatch(value):
            text = string_value(text)
        return ast.SetVariable(name=name, value=text, **self._located(meta))

    # ---- queries ------------------------------------------------------------------------
    def sql_query(self, meta, token: Token) -> exp.Query | exp.Values:
        return self._query(token)

    def recursive_binding(self, meta, name, columns, _as, query) -> ast.RecursiveBinding:
        column_defs = parse_columns(self.fragment, self._text(columns), self._at(columns))
        inner = self._inside(query, "query")
        if isinstance(inner, ast.MutuallyRecursive):
            raise self.fragment.error_at(
                self._at(query),
                "WITH MUTUALLY RECURSIVE cannot be nested in a binding",
                "move the inner bindings into the outer WITH MUTUALLY RECURSIVE",
            )
        return ast.RecursiveBinding(name=name, columns=column_defs, query=inner)

    def mutually_recursive(self, meta, _w, options, *rest) -> ast.MutuallyRecursive:
        *bindings, body = rest
        limit, on_limit = (
            (None, None) if options is None else self._inside(options, "recursion_limit")
        )
        return ast.MutuallyRecursive(
            bindings=tuple(bindings), body=self._query(body), limit=limit, on_limit=on_limit
        )


def _option_pair(option: _Option) -> tuple[str, str]:
    """(name, value) of a statement option; `SNAPSHOT false` is ("snapshot", "false")."""
    if option.value is not None:
        return " ".join(option.words), option.value
    if len(option.words) == 2:
        return option.words[0], option.words[1]
    return " ".join(option.words), "true"
