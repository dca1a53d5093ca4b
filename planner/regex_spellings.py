"""PostgreSQL's regular-expression operators and functions, spelled for each kernel.

`~`, `~*`, `!~`, `!~*`, `SIMILAR TO`, `substring(s from pattern)`, `regexp_match` and
`regexp_replace` take a pattern in PostgreSQL's syntax; a literal pattern is written
for RE2 (the in-process kernel) and for Java (Spark) by `regex.translate`, and the call
becomes a `DSQL_PER_KERNEL` of the two. Where one engine cannot run the pattern
(back-references and lookaround on RE2), that kernel's spelling is
`DSQL_UNSUPPORTED(message, hint)`, which the kernel raises as an `UnsupportedError`
when it renders the query (`runtime/kernel/base.py`); the other kernel runs it.
Functions whose value depends on a match's extent refuse a pattern whose extent RE2 or
Java could choose differently from PostgreSQL (`regex.Pattern.extent_safe`).

A pattern must be a literal (a text, `||` of texts, or a parameter, which the parser
binds as one): a pattern computed from the rows is refused, since the engines would
read it with their own syntax.

>>> call = sqlglot.parse_one("s ~ 'a\\d+'", read="postgres")
>>> bound_match(call.this, call.expression, False).sql("postgres")
"DSQL_PER_KERNEL(REGEXP_MATCHES(s, '(?s)a[0-9]+'), s ~ '(?s)a[0-9]+')"
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sqlglot  # noqa: F401 - the doctest parses with it
from sqlglot import exp

from dsql.errors import DsqlError, SchemaError, UnsupportedError
from dsql.planner import regex, text_spellings, types
from dsql.planner.expr import arguments
from dsql.planner.spellings import PER_KERNEL

#: The name of a kernel's spelling that refuses the call (`runtime.kernel.base`).
UNSUPPORTED = "DSQL_UNSUPPORTED"

#: Why a pattern must be a literal, and what may stand for one.
NON_LITERAL_HINT = (
    "write the pattern in the query, as text, || of texts or a parameter (?): dsql reads "
    "PostgreSQL's regular expressions for each engine when it plans the query"
)

#: The option letters a function's flags may hold (`g` where the function allows it).
_FLAG_LETTERS = set("icnmpswxqt")


def literal_text(e: exp.Expression | None) -> str | None:
    """The text of a string literal (also `'...'::text`, and `||` of such), else None."""
    while isinstance(e, exp.Paren) or (
        isinstance(e, exp.Cast) and e.to.is_type(*exp.DataType.TEXT_TYPES)
    ):
        e = e.this
    if isinstance(e, exp.DPipe):
        left, right = literal_text(e.this), literal_text(e.expression)
        return None if left is None or right is None else left + right
    return e.this if isinstance(e, exp.Literal) and e.is_string else None


def is_null(e: exp.Expression | None) -> bool:
    """Whether `e` is NULL (also cast): the call's value is NULL."""
    while isinstance(e, exp.Cast):
        e = e.this
    return isinstance(e, exp.Null)


def null_of(type_name: str) -> exp.Expression:
    return exp.Cast(this=exp.Null(), to=types.build(type_name))


def literal_flags(e: exp.Expression | None, name: str, global_ok: bool) -> str:
    """A function's literal flags, checked ("g" only where `global_ok`)."""
    if e is None:
        return ""
    text = literal_text(e)
    if text is None:
        raise SchemaError(
            f"{name}() needs literal flags", hint=f"write the flags in the query: {name}(s, p, 'i')"
        )
    for letter in text:
        if letter == "g" and not global_ok:
            raise SchemaError(
                f'{name}() does not support the "global" option',
                hint="use regexp_replace(s, p, r, 'g') to replace every match",
            )
        if letter != "g" and letter not in _FLAG_LETTERS:
            raise SchemaError(f'invalid regular expression option: "{letter}"')
    return text.replace("g", "")


def refusal(error: DsqlError) -> exp.Expression:
    return exp.Anonymous(
        this=UNSUPPORTED,
        expressions=[exp.Literal.string(error.message), exp.Literal.string(error.hint or "")],
    )


def spelled(
    pattern: str, flags: str, extent: bool, spell: Callable[[regex.Pattern, str], exp.Expression]
) -> exp.Expression:
    """`spell(translated, flavor)` for each kernel, as one per-kernel value; a flavor
    that cannot run the pattern refuses there; an invalid pattern is refused here."""
    spellings: list[exp.Expression] = []
    refusals: list[DsqlError] = []
    for flavor in ("re2", "java"):
        try:
            translated = regex.translate(pattern, flavor, flags)
        except regex.Refusal as error:
            refusals.append(error)
            spellings.append(refusal(error))
            continue
        if extent and not translated.extent_safe:
            raise UnsupportedError(
                "this pattern's match could differ from PostgreSQL's (its longest match)",
                hint="quantify single characters only (not groups), do not mix greedy and "
                "non-greedy quantifiers, and alternate between literal texts none of which "
                "starts another",
            )
        spellings.append(spell(translated, flavor))
    if len(refusals) == 2:
        raise refusals[0]
    return exp.Anonymous(this=PER_KERNEL, expressions=spellings)


def text_literal(text: str) -> exp.Literal:
    return exp.Literal.string(text)


def matches(s: exp.Expression, p: regex.Pattern, flavor: str) -> exp.Expression:
    if flavor == "re2":
        return exp.Anonymous(this="REGEXP_MATCHES", expressions=[s.copy(), text_literal(p.text)])
    return exp.RegexpLike(this=s.copy(), expression=text_literal(p.text))


def bound_match(
    s: exp.Expression,
    pattern: exp.Expression,
    insensitive: bool,
    flag_arg: exp.Expression | None = None,
) -> exp.Expression:
    """`s ~ pattern` (`insensitive`: `~*`), and `regexp_like(s, pattern [, flag_arg])`."""
    text = literal_text(pattern)
    if is_null(pattern) or is_null(flag_arg):
        return null_of("boolean")
    flags = ("i" if insensitive else "") + literal_flags(flag_arg, "regexp_like", global_ok=False)
    if text is None:
        raise UnsupportedError(
            "a regular expression match needs a literal pattern",
            hint=NON_LITERAL_HINT,
        )
    return spelled(text, flags, False, lambda p, f: matches(s, p, f))


def bound_similar(
    s: exp.Expression, pattern: exp.Expression, escape: exp.Expression | None
) -> exp.Expression:
    """`s SIMILAR TO pattern [ESCAPE escape]`."""
    text = literal_text(pattern)
    if is_null(pattern) or is_null(escape):
        return null_of("boolean")
    escape_text = "\\" if escape is None else literal_text(escape)
    if text is None or escape_text is None:
        raise UnsupportedError(
            "SIMILAR TO needs a literal pattern and escape",
            hint="write the pattern in the query, or use ~ with a regular expression",
        )
    if len(escape_text) > 1:
        raise SchemaError(
            "invalid escape string", hint="Escape string must be empty or one character."
        )
    are = regex.similar_to_are(text, escape_text or None)
    return spelled(are, "", False, lambda p, f: matches(s, p, f))


def extract(s: exp.Expression, p: regex.Pattern, flavor: str, group: int) -> exp.Expression:
    name = "REGEXP_EXTRACT"
    return exp.Anonymous(
        this=name, expressions=[s.copy(), text_literal(p.text), exp.Literal.number(group)]
    )


def substring(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`substring(s from pattern)`: the part of `s` the pattern's first group matched (the
    whole match where it has none), NULL where it does not match; `substring(s, n [,
    m])` by positions (`text_spellings.substring_positions`)."""
    if len(arg_types) < 2 or not arg_types[1].is_type(*exp.DataType.TEXT_TYPES):
        return text_spellings.substring_positions(call)
    s, pattern = call.this, call.args["start"]
    if call.args.get("length") is not None:
        raise UnsupportedError(
            "substring(s from pattern for escape) is not supported",
            hint="use substring(s from regular_expression) with a group around the part",
        )
    text = literal_text(pattern)
    if is_null(pattern):
        return null_of("text")
    if text is None:
        raise UnsupportedError(
            "substring(s from pattern) needs a literal pattern",
            hint=NON_LITERAL_HINT,
        )

    def spell(p: regex.Pattern, flavor: str) -> exp.Expression:
        found = extract(s, p, flavor, 1 if p.groups else 0)
        return exp.Case(ifs=[exp.If(this=matches(s, p, flavor), true=found)])

    return exp.Cast(this=spelled(text, "", True, spell), to=types.build("text"))


def regexp_match(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`regexp_match(s, pattern [, flags])`: the texts of the first match's groups (the
    whole match where there are none), NULL where it does not match."""
    args = arguments(call)
    s, pattern = args[0], args[1]
    flags = literal_flags(args[2] if len(args) > 2 else None, "regexp_match", global_ok=False)
    text = literal_text(pattern)
    if is_null(pattern):
        return null_of("text[]")
    if text is None:
        raise UnsupportedError("regexp_match() needs a literal pattern", hint=NON_LITERAL_HINT)

    def spell(p: regex.Pattern, flavor: str) -> exp.Expression:
        groups = range(1, p.groups + 1) if p.groups else [0]
        found = exp.Array(expressions=[extract(s, p, flavor, g) for g in groups])
        return exp.Case(ifs=[exp.If(this=matches(s, p, flavor), true=found)])

    return exp.Cast(this=spelled(text, flags, True, spell), to=types.build("text[]"))


def regexp_replace(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`regexp_replace(s, pattern, replacement [, flags])`: the first match (every match
    with flag `g`) replaced; the replacement's `\\1` is a group's text, `\\&` the match.

    The replacement must be a literal (its groups are spelled per engine: Spark's `$1`).
    Without `g` only the first match is replaced; Spark replaces every match, so there
    the pattern is anchored behind the shortest prefix before the first match, kept as
    group 1 (the match is group 2).
    """
    s, pattern, replacement = call.this, call.expression, call.args.get("replacement")
    if not isinstance(replacement, exp.Literal) or not replacement.is_string:
        raise SchemaError(
            "regexp_replace() needs a literal replacement",
            hint="write the replacement text in the query: regexp_replace(s, 'a(.)', 'b\\1')",
        )
    flag_arg = call.args.get("modifiers")
    if is_null(pattern) or is_null(flag_arg):
        return null_of("text")
    every = flag_arg is not None and "g" in (literal_text(flag_arg) or "")
    flags = literal_flags(flag_arg, "regexp_replace", global_ok=True)
    text = literal_text(pattern)
    if text is None:
        raise UnsupportedError("regexp_replace() needs a literal pattern", hint=NON_LITERAL_HINT)
    parts = _replacement_parts(replacement.name)

    def spell(p: regex.Pattern, flavor: str) -> exp.Expression:
        if flavor == "re2" and every and p.nullable:
            return refusal(
                UnsupportedError(
                    "regexp_replace(..., 'g') of a pattern that matches empty text is not "
                    "supported by the in-process kernel (RE2 skips an empty match after a match)",
                    hint="make the pattern match at least one character (+ for *), or run on Spark",
                )
            )
        if flavor == "re2":
            duck = "".join(q if isinstance(q, str) else f"\\{q}" for q in _escaped(parts, "\\"))
            args = [s.copy(), text_literal(p.text), text_literal(duck)]
            return exp.Anonymous(
                this="REGEXP_REPLACE", expressions=[*args, text_literal("g")] if every else args
            )
        if every:
            java = "".join(q if isinstance(q, str) else f"${q}" for q in _escaped(parts, "\\$"))
            return exp.RegexpReplace(
                this=s.copy(), expression=text_literal(p.text), replacement=text_literal(java)
            )
        # Group 1 is the prefix, group 2 the match: the pattern's own groups come after.
        shifted = [q if isinstance(q, str) else q + 2 for q in parts]
        java = "$1" + "".join(
            q if isinstance(q, str) else f"${q}" for q in _escaped(shifted, "\\$")
        )
        first = f"^((?s:.*?))({p.text})"
        return exp.RegexpReplace(
            this=s.copy(), expression=text_literal(first), replacement=text_literal(java)
        )

    return spelled(text, flags, True, spell)


def _replacement_parts(text: str) -> list[str | int]:
    """PostgreSQL's replacement text as literal pieces and group numbers (0: the match).

    >>> _replacement_parts(r"<\\1|\\&|\\\\|\\x>")
    ['<', 1, '|', 0, '|', '\\\\', '|', 'x', '>']
    """
    parts: list[str | int] = []
    k = 0
    while k < len(text):
        c = text[k]
        if c == "\\" and k + 1 < len(text):
            nxt = text[k + 1]
            parts.append(int(nxt) if nxt.isdigit() else 0 if nxt == "&" else nxt)
            k += 2
        else:
            parts.append(c)
            k += 1
    return parts


def _escaped(parts: Sequence[str | int], special: str) -> list[str | int]:
    """Literal pieces with the kernel's special characters escaped by a backslash."""
    return [
        "".join(f"\\{c}" if c in special else c for c in p) if isinstance(p, str) else p
        for p in parts
    ]


__all__ = [
    "UNSUPPORTED",
    "bound_match",
    "bound_similar",
    "regexp_match",
    "regexp_replace",
    "substring",
]
