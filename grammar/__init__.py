"""dsql's statement grammar: `parse(text)` to a tuple of statement AST values.

Statements are recognized by a lark grammar (`statements.lark`); every embedded query
and expression is parsed by sqlglot's PostgreSQL dialect. See README.md.

>>> (stmt,) = parse("SELECT 1 AS OF 5")
>>> stmt.query.sql(), stmt.as_of.sql()
('SELECT 1', '5')
"""

from __future__ import annotations

from dsql.grammar.ast import (
    Advance,
    Begin,
    Close,
    ColumnDef,
    Commit,
    Copy,
    CreateConnection,
    CreateDeltaSource,
    CreateIndex,
    CreatePgSource,
    CreateSecret,
    CreateSink,
    CreateSource,
    CreateTable,
    CreateTableAs,
    CreateView,
    DeclareCursor,
    Delete,
    Drop,
    DropConnection,
    DropSecret,
    DropSink,
    Explain,
    Fetch,
    Insert,
    MutuallyRecursive,
    Query,
    RecursiveBinding,
    Rollback,
    Select,
    SetVariable,
    Show,
    Statement,
    Subscribe,
    Update,
)
from dsql.grammar.parser import parse

__all__ = [
    "Advance",
    "Begin",
    "Close",
    "ColumnDef",
    "Commit",
    "Copy",
    "CreateIndex",
    "CreateSink",
    "CreateSource",
    "CreateTable",
    "CreateTableAs",
    "CreateView",
    "DeclareCursor",
    "Delete",
    "Drop",
    "CreateConnection",
    "CreateDeltaSource",
    "CreateSecret",
    "CreatePgSource",
    "DropConnection",
    "DropSecret",
    "DropSink",
    "Explain",
    "Fetch",
    "Insert",
    "MutuallyRecursive",
    "Query",
    "RecursiveBinding",
    "Rollback",
    "Select",
    "SetVariable",
    "Show",
    "Statement",
    "Subscribe",
    "Update",
    "parse",
]
