"""PostgreSQL's array text: `'{1,2,NULL}'`, `'{a,"b c"}'`, read as one-dimensional arrays.

The grammar (PostgreSQL's `array_in`): blanks may surround the braces and each element;
elements are separated by commas; an element is quoted (`"..."`, where a backslash takes
the next character as it is) or unquoted (no braces, commas or quotes; a backslash
escapes; blanks around it dropped). An unquoted `NULL`, in any case, is the null
element; `"NULL"` is the text. `{}` is the empty array. An element that is itself a
brace list makes a multidimensional array, which dsql does not have: refused.

A literal (`'{1,2}'::int[]`, an INSERT of `'{1,2}'` into an int[] column) is read here,
in the planner or the driver (`parse`); a text column cast to an array is read by the
kernel with the same grammar written as regular expressions (`from_text`).

>>> parse('{a, "b c" ,NULL,"NULL", x\\\\,y}')
['a', 'b c', None, 'NULL', 'x,y']
>>> parse("{}")
[]
"""

from __future__ import annotations

from sqlglot import exp

from dsql.errors import SchemaError, UnsupportedError
from dsql.planner import numeric, types

#: The error of a text that is not an array literal.
MALFORMED = "malformed array literal"

#: The blanks PostgreSQL's array input skips (its `scanner_isspace`).
_BLANKS = " \t\n\r\v\f"


def _malformed(text: str, detail: str) -> SchemaError:
    return SchemaError(f'{MALFORMED}: "{text}"', hint=detail)


def parse(text: str) -> list[str | None]:
    """The elements of the array text `text` (None: a NULL element); a `SchemaError`
    "malformed array literal" (the reason as hint) where PostgreSQL's input refuses it,
    an `UnsupportedError` for a multidimensional array or explicit bounds."""
    k, n = 0, len(text)

    def skip(k: int) -> int:
        while k < n and text[k] in _BLANKS:
            k += 1
        return k

    k = skip(k)
    if k < n and text[k] == "[":
        raise UnsupportedError(
            f'array bounds are not supported: "{text}"', hint="arrays in dsql start at 1"
        )
    if k >= n or text[k] != "{":
        raise _malformed(text, 'Array value must start with "{" or dimension information.')
    k = skip(k + 1)
    elements: list[str | None] = []
    if k < n and text[k] == "}":
        k += 1
    else:
        while True:
            if k < n and text[k] == "{":
                raise UnsupportedError(
                    f'multidimensional arrays are not supported: "{text}"',
                    hint="dsql's arrays have one dimension",
                )
            element, k = _element(text, k)
            elements.append(element)
            k = skip(k)
            if k >= n:
                raise _malformed(text, "Unexpected end of input.")
            if text[k] == "}":
                k += 1
                break
            if text[k] != ",":
                raise _malformed(text, f'Unexpected "{text[k]}" character.')
            k = skip(k + 1)
    if skip(k) != n:
        raise _malformed(text, "Junk after closing right brace.")
    return elements


def _element(text: str, k: int) -> tuple[str | None, int]:
    """The element starting at `k` (after blanks) and where it ends."""
    n = len(text)
    if k < n and text[k] == '"':
        out: list[str] = []
        k += 1
        while k < n and text[k] != '"':
            if text[k] == "\\":
                k += 1
                if k >= n:
                    break
            out.append(text[k])
            k += 1
        if k >= n:
            raise _malformed(text, "Unexpected end of input.")
        return "".join(out), k + 1
    out, kept, escaped = [], 0, False
    while k < n and text[k] not in ',{}"':
        if text[k] == "\\":
            k += 1
            if k >= n:
                raise _malformed(text, "Unexpected end of input.")
            escaped = True
            out.append(text[k])
            kept = len(out)  # an escaped blank is kept
        else:
            out.append(text[k])
            if text[k] not in _BLANKS:
                kept = len(out)
        k += 1
    if k < n and text[k] in '{"':
        raise _malformed(text, f'Unexpected "{text[k]}" character.')
    value = "".join(out[:kept])
    if not value:
        raise _malformed(text, f'Unexpected "{text[k] if k < n else "}"}" character.')
    return (None if not escaped and value.upper() == "NULL" else value), k


def literal(text: str, array_type: exp.DataType) -> exp.Expression:
    """The array literal `text` of type `array_type` as `ARRAY[...]` of its elements,
    each cast from its text to the element type (PostgreSQL's element input)."""
    elements = parse(text)
    element = array_type.expressions[0]
    if _unbounded_numeric(element):
        # Each element keeps its digits; the array's scale is the largest one's.
        scales = [numeric.literal_scale(v.strip()) or 0 for v in elements if v is not None]
        element = numeric.numeric_type(min(max(scales, default=0), types.DEFAULT_DECIMAL[0]))
    values = [
        exp.Null() if v is None else exp.Cast(this=exp.Literal.string(v), to=element.copy())
        for v in elements
    ]
    return exp.Cast(
        this=exp.Array(expressions=values),
        to=exp.DataType(this=exp.DataType.Type.ARRAY, expressions=[element], nested=True),
    )


def _unbounded_numeric(t: exp.DataType) -> bool:
    return t.this in (exp.DataType.Type.DECIMAL, exp.DataType.Type.BIGDECIMAL) and not t.expressions


# --- the same grammar, as regular expressions both kernels evaluate -----------------------

_S = r"[ \t\n\r\x0B\f]"
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_PLAIN_CHAR = r'(?:[^ \t\n\r\x0B\f,{}"\\]|\\.)'
_UNQUOTED = rf'{_PLAIN_CHAR}(?:(?:[^,{{}}"\\]|\\.)*{_PLAIN_CHAR})?'
_ITEM = f"(?:{_QUOTED}|{_UNQUOTED})"
#: The whole text of a one-dimensional array.
WHOLE = rf"^{_S}*\{{{_S}*(?:{_ITEM}{_S}*(?:,{_S}*{_ITEM}{_S}*)*)?\}}{_S}*$"
#: One element with what precedes it (group 1: the element as written).
ONE = rf"[{{,]{_S}*({_ITEM})"


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def from_text(value: exp.Expression, array_type: exp.DataType) -> exp.Expression:
    """`value::array_type` for a text `value` read by the kernel: its elements unquoted,
    unescaped and cast to the element type; an error where the text is not a
    one-dimensional array literal."""
    from dsql.planner import spellings
    from dsql.planner.expr import RaiseError

    element = array_type.expressions[0]
    if _unbounded_numeric(element):
        element = types.build("decimal({}, {})".format(*types.DEFAULT_DECIMAL))
        array_type = exp.DataType(this=exp.DataType.Type.ARRAY, expressions=[element], nested=True)
    nested = rf"^{_S}*\{{{_S}*\{{"
    whole, one, nest = (_sql_string(p) for p in (WHOLE, ONE, nested))
    unquote = "CASE WHEN LEFT(__e, 1) = '\"' THEN SUBSTRING(__e, 2, LENGTH(__e) - 2) ELSE __e END"
    duck_value = (
        f"CASE WHEN LEFT(__e, 1) <> '\"' AND UPPER(__e) = 'NULL' THEN NULL ELSE"
        f" REGEXP_REPLACE({unquote}, '\\\\(.)', '\\1', 'gs') END"
    )
    spark_value = (
        f"CASE WHEN LEFT(__e, 1) <> '\"' AND UPPER(__e) = 'NULL' THEN NULL ELSE"
        f" REGEXP_REPLACE({unquote}, '(?s)\\\\\\\\(.)', '$1') END"
    )
    element_sql = element.sql("duckdb"), element.sql("spark")
    parsed = spellings.per_kernel(
        f"LIST_TRANSFORM(REGEXP_EXTRACT_ALL(__0, {one}, 1), LAMBDA __e:"
        f" CAST({duck_value} AS {element_sql[0]}))",
        f"TRANSFORM(REGEXP_EXTRACT_ALL(__0, {_spark_string(ONE)}, 1), __e ->"
        f" CAST({spark_value} AS {element_sql[1]}))",
        [value],
    )
    matches = spellings.per_kernel(
        f"REGEXP_MATCHES(__0, {whole}, 's')",
        f"__0 RLIKE {_spark_string('(?s)' + WHOLE)}",
        [value],
    )
    nests = spellings.per_kernel(
        f"REGEXP_MATCHES(__0, {nest})", f"__0 RLIKE {_spark_string(nested)}", [value]
    )
    message = exp.Literal.string(MALFORMED)
    case = exp.Case(
        ifs=[
            exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()), true=exp.Null()),
            exp.If(
                this=nests,
                true=RaiseError(
                    this=exp.Literal.string("multidimensional arrays are not supported")
                ),
            ),
            exp.If(this=exp.Not(this=matches), true=RaiseError(this=message)),
        ],
        default=parsed,
    )
    return exp.Cast(this=case, to=array_type.copy())


def _spark_string(text: str) -> str:
    """`text` as a Spark SQL string literal (Spark reads backslash escapes in strings)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


__all__ = ["MALFORMED", "ONE", "WHOLE", "from_text", "literal", "parse"]
