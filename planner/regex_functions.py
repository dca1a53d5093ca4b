"""PostgreSQL's regular-expression functions over many matches, spelled for each kernel.

`regexp_matches` and `regexp_split_to_table` return sets of rows: each is spelled as
`unnest` of an array (of the matches' group arrays, of the pieces), so that it plans,
zips and is maintained as `unnest` is (`bind_table_function.py`). `regexp_count`,
`regexp_substr`, `regexp_instr` and `regexp_split_to_array` are scalars. Every one
takes a literal pattern, written for RE2 and Java by `regex.translate`
(`regex_spellings.spelled`), and refuses a pattern whose matches' extents RE2 or Java
could choose otherwise than PostgreSQL (`regex.Pattern.extent_safe`): each match ends
where the next search begins.

The engines find successive matches as PostgreSQL does: after a match the search goes
on where it ended, after an empty match one character further (`regexp_count('aab',
'a*')` is 3: `aa`, then the empty matches before `b` and at the end). They split
otherwise around empty matches (PostgreSQL ignores those at either end), so the split
functions refuse a pattern that may match empty text.

>>> call = sqlglot.parse_one("regexp_count(s, 'a+')", read="postgres")
>>> regexp_count(call, ()).this.expressions[0].sql("duckdb")  # the in-process kernel's
"LENGTH(REGEXP_EXTRACT_ALL(s, '(?s)a+'))"
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sqlglot  # noqa: F401 - the doctest parses with it
from sqlglot import exp

from dsql.errors import SchemaError, UnsupportedError
from dsql.planner import regex, types
from dsql.planner.expr import arguments, as_expression
from dsql.planner.regex_spellings import (
    NON_LITERAL_HINT,
    is_null,
    literal_flags,
    literal_text,
    null_of,
    spelled,
)
from dsql.planner.spellings import fill

#: The most matches `regexp_instr` may skip (`N - 1`): RE2 repeats a group at most 1000
#: times.
_MOST_SKIPPED = 999


def _pattern(name: str, pattern: exp.Expression) -> str:
    """A function's literal pattern; a non-literal one is refused."""
    text = literal_text(pattern)
    if text is None:
        raise UnsupportedError(
            f"{name}() needs a literal pattern",
            hint=NON_LITERAL_HINT,
        )
    return text


def _integer(name: str, e: exp.Expression | None, parameter: str, default: int) -> int:
    """A function's literal integer argument `parameter` (`default` where it is absent)."""
    if e is None:
        return default
    value = types.integer_literal(e)
    if value is None:
        raise UnsupportedError(
            f'{name}() needs a literal "{parameter}"',
            hint=f"write {parameter} as an integer in the query",
        )
    return value


def _positive(name: str, value: int, parameter: str) -> None:
    if value <= 0:
        raise SchemaError(f'invalid value for parameter "{parameter}": {value}')


def _from_start(name: str, start: exp.Expression | None) -> None:
    """Refuse a `start` other than 1: the engines cannot begin a search inside the text
    with `^`, `\\m` and lookbehind still seeing what precedes it."""
    value = _integer(name, start, "start", 1)
    _positive(name, value, "start")
    if value != 1:
        raise UnsupportedError(
            f"{name}() with a start position other than 1 is not supported",
            hint=f"call {name}() on substr(s, start) where the pattern has no anchors",
        )


#: SQL for DuckDB and for Spark over `__0` (the text) and `__1` (the translated pattern),
#: given the translated pattern.
Templates = Callable[[regex.Pattern], tuple[str, str]]


def _spell(
    s: exp.Expression, text: str, flags: str, templates: Templates, refuse_nullable: str = ""
) -> exp.Expression:
    """The per-kernel value of `templates`; `refuse_nullable` names the function refusing
    a pattern that may match empty text."""

    def spell(p: regex.Pattern, flavor: str) -> exp.Expression:
        if refuse_nullable and p.nullable:
            raise UnsupportedError(
                f"{refuse_nullable}() of a pattern that may match empty text is not supported",
                hint="make the pattern match at least one character (+ for *)",
            )
        duckdb, spark = templates(p)
        sql, dialect = (duckdb, "duckdb") if flavor == "re2" else (spark, "spark")
        return fill(sql, dialect, [s, exp.Literal.string(p.text)])

    return spelled(text, flags, True, spell)


def _unnest(array: exp.Expression) -> exp.Expression:
    return exp.Unnest(expressions=[array])


def regexp_matches(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`regexp_matches(s, pattern [, flags])`: a row per match (with flag `g`; else of the
    first match only), each the text array of the match's groups (the whole match
    where the pattern has none); no row for no match or a NULL argument."""
    args = arguments(call)
    s, pattern = args[0], args[1]
    flag_arg = args[2] if len(args) > 2 else None
    if is_null(pattern) or is_null(flag_arg):
        return _unnest(null_of("text[][]"))
    every = "g" in (literal_text(flag_arg) or "")
    flags = literal_flags(flag_arg, "regexp_matches", global_ok=True)
    text = _pattern("regexp_matches", pattern)

    def templates(p: regex.Pattern) -> tuple[str, str]:
        numbers = range(1, p.groups + 1) if p.groups else [0]
        if every:
            duck = ", ".join(f"REGEXP_EXTRACT_ALL(__0, __1, {g})[__i]" for g in numbers)
            spark = ", ".join(
                f"ELEMENT_AT(REGEXP_EXTRACT_ALL(__0, __1, {g}), __i + 1)" for g in numbers
            )
            return (
                f"LIST_TRANSFORM(REGEXP_EXTRACT_ALL(__0, __1, 0), LAMBDA __e, __i: [{duck}])",
                f"TRANSFORM(REGEXP_EXTRACT_ALL(__0, __1, 0), (__e, __i) -> ARRAY({spark}))",
            )
        found = ", ".join(f"REGEXP_EXTRACT(__0, __1, {g})" for g in numbers)
        return (
            f"CASE WHEN REGEXP_MATCHES(__0, __1) THEN [[{found}]] END",
            f"CASE WHEN __0 RLIKE __1 THEN ARRAY(ARRAY({found})) END",
        )

    value = _spell(s, text, flags, templates)
    return _unnest(exp.Cast(this=value, to=types.build("text[][]")))


def regexp_split_to_array(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`regexp_split_to_array(s, pattern [, flags])`: the texts between the matches, in
    order, with the empty ones before a first match at the start, between adjacent
    matches and after a last match at the end."""
    args = arguments(call)
    s, pattern = args[0], args[1]
    flag_arg = args[2] if len(args) > 2 else None
    if is_null(pattern) or is_null(flag_arg):
        return null_of("text[]")
    flags = literal_flags(flag_arg, "regexp_split_to_array", global_ok=False)
    text = _pattern(call_name(call), pattern)
    split = ("REGEXP_SPLIT_TO_ARRAY(__0, __1)", "SPLIT(__0, __1, -1)")
    value = _spell(s, text, flags, lambda p: split, refuse_nullable=call_name(call))
    return exp.Cast(this=value, to=types.build("text[]"))


def regexp_split_to_table(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`regexp_split_to_table(s, pattern [, flags])`: a row per piece of
    `regexp_split_to_array`; no row for a NULL argument."""
    return _unnest(as_expression(regexp_split_to_array(call, arg_types)))


def call_name(call: exp.Func) -> str:
    return call.name.lower() if isinstance(call, exp.Anonymous) else call.sql_name().lower()


def regexp_count(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`regexp_count(s, pattern [, start [, flags]])`: how many times the pattern
    matches, each search from where the previous match ended."""
    s, pattern = call.this, call.expression
    if is_null(pattern) or any(is_null(call.args.get(k)) for k in ("parameters", "position")):
        return null_of("int")
    flags = literal_flags(call.args.get("parameters"), "regexp_count", global_ok=False)
    _from_start("regexp_count", call.args.get("position"))
    text = _pattern("regexp_count", pattern)
    count = (
        "LENGTH(REGEXP_EXTRACT_ALL(__0, __1, 0))",
        "CASE WHEN __0 IS NOT NULL THEN SIZE(REGEXP_EXTRACT_ALL(__0, __1, 0)) END",
    )
    return exp.Cast(this=_spell(s, text, flags, lambda p: count), to=types.build("int"))


def _nth_match(name: str, call: exp.Func) -> tuple[str, str, int, int, int]:
    """The pattern, flags, `n` and `subexpr` of `regexp_substr` or `regexp_instr`, checked,
    and the pattern's number of groups."""
    flags = literal_flags(call.args.get("parameters"), name, global_ok=False)
    _from_start(name, call.args.get("position"))
    n = _integer(name, call.args.get("occurrence"), "n", 1)
    _positive(name, n, "n")
    group = _integer(name, call.args.get("group"), "subexpr", 0)
    if group < 0:
        raise SchemaError(f'invalid value for parameter "subexpr": {group}')
    text = _pattern(name, call.expression)
    return text, flags, n, group, regex.translate(text, "java", flags).groups


def regexp_substr(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`regexp_substr(s, pattern [, start [, n [, flags [, subexpr]]]])`: the text of the
    `n`-th match (of its group `subexpr`), NULL where there are fewer matches or
    fewer groups."""
    s, pattern = call.this, call.expression
    optional = [call.args.get(k) for k in ("position", "occurrence", "parameters", "group")]
    if is_null(pattern) or any(is_null(a) for a in optional):
        return null_of("text")
    text, flags, n, group, groups = _nth_match("regexp_substr", call)
    if group > max(groups, 1):
        return null_of("text")
    group = group if groups else 0  # without groups, the match is subexpression 1
    nth = (
        f"REGEXP_EXTRACT_ALL(__0, __1, {group})[{n}]",
        f"TRY_ELEMENT_AT(REGEXP_EXTRACT_ALL(__0, __1, {group}), {n})",
    )
    return exp.Cast(this=_spell(s, text, flags, lambda p: nth), to=types.build("text"))


def regexp_instr(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`regexp_instr(s, pattern [, start [, n [, endoption [, flags [, subexpr]]]]])`: the
    position of the `n`-th match (with `endoption` 1: of the character after it), 0
    where there are fewer matches.

    Spelled as one match of `^((?:.*?(?:p)){n-1}.*?)(p)`: its first group's length is
    the position's; the lazy prefixes make it the `n`-th successive match where `p`
    never matches empty text (for `n` 1, always).
    """
    s, pattern = call.this, call.expression
    keys = ("position", "occurrence", "option", "parameters", "group")
    if is_null(pattern) or any(is_null(call.args.get(k)) for k in keys):
        return null_of("int")
    text, flags, n, group, groups = _nth_match("regexp_instr", call)
    end = _integer("regexp_instr", call.args.get("option"), "endoption", 0)
    if end not in (0, 1):
        raise SchemaError(f'invalid value for parameter "endoption": {end}')
    if n - 1 > _MOST_SKIPPED:
        raise UnsupportedError(f"regexp_instr() of a match past the {_MOST_SKIPPED + 1}th")
    if group > max(groups, 1):
        present = exp.Not(this=exp.Is(this=s.copy(), expression=exp.Null()))
        zero = exp.Case(ifs=[exp.If(this=present, true=exp.Literal.number(0))])
        return exp.Cast(this=zero, to=types.build("int"))
    if group and groups:
        raise UnsupportedError(
            "regexp_instr() of a subexpression is not supported",
            hint="find the match with regexp_instr() and the group's text with regexp_substr()",
        )

    def spell(p: regex.Pattern, flavor: str) -> exp.Expression:
        if n > 1 and p.nullable:
            raise UnsupportedError(
                "regexp_instr() past the first match of a pattern that may match empty text "
                "is not supported",
                hint="make the pattern match at least one character (+ for *)",
            )
        skipped = f"(?:(?s:.*?)(?:{p.text})){{{n - 1}}}" if n > 1 else ""
        found = 2 + (p.groups if n > 1 else 0)
        whole = f"^({skipped}(?s:.*?))({p.text})"
        length = "LENGTH" if flavor == "re2" else "CHAR_LENGTH"
        position = f"{length}(REGEXP_EXTRACT(__0, __1, 1)) + 1"
        if end:
            position += f" + {length}(REGEXP_EXTRACT(__0, __1, {found}))"
        test = "REGEXP_MATCHES(__0, __1)" if flavor == "re2" else "__0 RLIKE __1"
        sql = f"CASE WHEN {test} THEN {position} WHEN __0 IS NOT NULL THEN 0 END"
        dialect = "duckdb" if flavor == "re2" else "spark"
        return fill(sql, dialect, [s, exp.Literal.string(whole)])

    return exp.Cast(this=spelled(text, flags, True, spell), to=types.build("int"))


__all__ = [
    "regexp_count",
    "regexp_instr",
    "regexp_matches",
    "regexp_split_to_array",
    "regexp_split_to_table",
    "regexp_substr",
]
