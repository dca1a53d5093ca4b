"""Errors a user reads: every failure dsql reports is a `DsqlError`.

An error carries the message, optionally the statement text with the position
(1-based line and column) it refers to, and a hint saying how to fix it.
`str(error)` renders all three, with a caret under the position:

>>> e = SchemaError("unknown column 'x'", statement="SELECT x FROM t",
...                 position=(1, 8), hint="columns of t are: a, b")
>>> print(e)
unknown column 'x'
  SELECT x FROM t
         ^
hint: columns of t are: a, b

`position` may be counted in a larger input (a script) the statement is part of;
`origin` is then the (line, column) where the statement starts in that input, and
the caret is drawn relative to it:

>>> e = ParseError("unexpected 'FORM'", statement="SELECT 1 FORM t",
...                position=(2, 12), origin=(2, 3))
>>> print(e)
unexpected 'FORM'
  SELECT 1 FORM t
           ^

The hierarchy is shallow on purpose: callers catch `DsqlError`; the subclass
says which stage refused the input. PEP 249's names (`ProgrammingError`,
`OperationalError`, ...) sit between, so DB-API code catches them as usual.
"""

from __future__ import annotations

from typing import Any


class DsqlError(Exception):
    """An error with a message, an optional statement position, and a hint."""

    def __init__(
        self,
        message: str,
        *,
        statement: str | None = None,
        position: tuple[int, int] | None = None,
        hint: str | None = None,
        origin: tuple[int, int] = (1, 1),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.statement = statement
        self.position = position
        self.hint = hint
        self.origin = origin

    @property
    def local_position(self) -> tuple[int, int] | None:
        """`position` as a (line, column) inside `statement` (both 1-based)."""
        if self.position is None:
            return None
        line, column = self.position
        first_line, first_column = self.origin
        if line == first_line:
            column -= first_column - 1
        return line - first_line + 1, column

    def __str__(self) -> str:
        lines = [self.message]
        if self.statement is not None:
            text_lines = self.statement.splitlines() or [""]
            local = self.local_position
            if local is not None:
                line_no, column = local
                line_no = min(max(line_no, 1), len(text_lines))
                lines.append("  " + text_lines[line_no - 1])
                lines.append("  " + " " * max(column - 1, 0) + "^")
            else:
                lines.extend("  " + line for line in text_lines[:3])
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return "\n".join(lines)


# PEP 249's classes, so DB-API code catches dsql's errors by the usual names.
class Warning(Exception):  # noqa: A001 - the name PEP 249 prescribes
    """PEP 249's warning class (dsql raises none today)."""


Error = DsqlError


class DsqlWarning(UserWarning):
    """A notice about a statement that succeeded: a materialized view went into error
    (`warnings.warn` by the API; the CLI prints it)."""


class InterfaceError(DsqlError):
    """The API was misused: a closed connection or cursor, a bad parameter count."""


class DatabaseError(DsqlError):
    """PEP 249's base of errors about the statement or the data."""


class ProgrammingError(DatabaseError):
    """PEP 249: a statement dsql refuses (syntax, names, types)."""


class DataError(DatabaseError):
    """PEP 249: a problem with the processed data."""


class OperationalError(DatabaseError):
    """PEP 249: the engine or the environment failed, not the statement."""


class IntegrityError(DatabaseError):
    """PEP 249: a constraint was violated."""


class InternalError(DatabaseError):
    """PEP 249: dsql reached a state it should not (a bug: please report it)."""


class NotSupportedError(DatabaseError):
    """PEP 249: a method or statement dsql does not support."""


class ParseError(ProgrammingError):
    """The text is not a statement dsql understands."""


class SchemaError(ProgrammingError):
    """Names or columns that do not exist, clash, or do not line up."""


class TypeMismatchError(ProgrammingError):
    """Values or expressions of types that cannot be combined."""


class AccessError(ProgrammingError):
    """SQL named a file outside the directories it may reach (`dsql.sandbox`)."""


class TimeError(ProgrammingError):
    """An update or read at a time the collection can no longer accept or show."""


class RecursionLimitError(DataError):
    """An iteration did not converge within its round limit."""


class UnsupportedError(NotSupportedError):
    """A valid request that dsql does not (yet) compile; the hint says how to rewrite it."""


class ExecutionError(OperationalError):
    """The engine (Spark, DuckDB) failed while evaluating a step."""


class SourceError(OperationalError):
    """A file or other external source could not be read (missing, unreadable, bad format)."""


class StateLostError(OperationalError):
    """State a relation keeps off the driver (Spark's stored batches) is missing or
    unreadable: the statement that meets it is rolled back, and every statement over
    that relation refuses until it is dropped and created again; it does not heal.

    `path`: where the lost state was stored (a URI); `owner`: the id of the dataflow
    node that stored it, when the kernel knows it; `relation`: the table or view the
    state belongs to, once the session has named it."""

    def __init__(
        self, message: str, *, path: str | None = None, owner: int | None = None, **kw: Any
    ) -> None:
        super().__init__(message, **kw)
        self.path = path
        self.owner = owner
        self.relation: str | None = None


class EnvironmentSetupError(OperationalError):
    """The machine lacks something dsql needs to run (such as Java for Spark)."""


class QueryCanceledError(OperationalError):
    """A statement ran past `statement_timeout` and was canceled; the session stays usable."""


class ResourceLimitError(OperationalError):
    """A statement needs more than a limit allows (expression nesting, `memory_limit`); it
    is refused or stopped and the session stays usable."""


class ParameterError(InterfaceError, ProgrammingError):
    """Query parameters that do not fit the statement: too many or too few for its `?`
    placeholders, or a value of a type dsql cannot bind (PEP 249 drivers raise either
    class for this, so it is both)."""


#: PostgreSQL's message for a numeric past its type's digits (SQLSTATE 22003).
NUMERIC_OVERFLOW = "numeric field overflow"

#: The hint of a value past dsql's numeric, which PostgreSQL's unbounded numeric holds.
NUMERIC_LIMIT = (
    "dsql's numeric holds at most 38 digits (PostgreSQL's is unbounded): a quotient, avg, "
    "variance and stddev keep 20 of them after the point, so at most 18 before it; "
    "variance and stddev square values of at most 19 digits; a numeric column declared "
    "without precision keeps 10 after the point; use double precision for larger values"
)


def numeric_overflow() -> ExecutionError:
    """The error of a value past dsql's 38-digit numeric (`NUMERIC_LIMIT`)."""
    return ExecutionError(NUMERIC_OVERFLOW, hint=NUMERIC_LIMIT)
