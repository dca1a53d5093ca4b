"""PostgreSQL's regular expressions (ARE syntax) written for the kernels' engines.

PostgreSQL reads patterns as Henry Spencer's advanced regular expressions; DuckDB runs
RE2 and Spark runs `java.util.regex`. `translate(pattern, flavor, flags)` writes a
PostgreSQL pattern in the flavor's syntax with PostgreSQL's meaning:

- options: `(?flags)` at the start and the function's flags (`i`, `c`, `n`/`m`, `p`, `w`,
  `s`, `x`, `q`, `t`), and the `***:`/`***=` directors; `.` matches a newline unless
  newline-sensitive (`n`), as in PostgreSQL;
- escapes: `\\m` `\\M` (word start/end), `\\y` `\\Y` (boundary or not), `\\A` `\\Z`, `\\B`
  (a backslash), `\\b` (a backspace), `\\e`, `\\xhh`, `\\uhhhh`, `\\cX`, and the classes
  `\\d \\s \\w` (ASCII, as PostgreSQL's C locale) also inside brackets;
- brackets: `[[:alpha:]]` and the other POSIX classes, `[[.c.]]`, `[[=c=]]`, a leading
  `]`, and characters Java reads specially inside brackets (`[`, `&&`);
- groups `(...)`, `(?:...)`, lookaround `(?=` `(?!` `(?<=` `(?<!` and back-references
  `\\1` (Java only: RE2 has neither, so the in-process kernel refuses them).

A construct a flavor cannot express is a `Refusal` (a `DsqlError`); a pattern PostgreSQL
itself rejects is a `SchemaError` ("invalid regular expression: ...").

Where a match's extent matters (`substring`, `regexp_replace`, `regexp_match`),
PostgreSQL takes the longest match (the shortest for a non-greedy pattern), where RE2
and Java take the first their backtracking order finds. The two agree when every
quantifier applies to one character (a literal, `.`, a class or a bracket), all
quantifiers are alike greedy or alike non-greedy, and alternatives are literal texts
none of which starts another; `Pattern.extent_safe` says so, and such functions refuse
other patterns.

>>> translate(r"\\mfoo[[:digit:]]+", "java").text
'(?s)(?<![0-9A-Za-z_])(?=[0-9A-Za-z_])foo[0-9]+'
>>> translate(r"\\mfoo", "re2").text
'(?s)\\\\bfoo'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dsql.errors import SchemaError, UnsupportedError

Flavor = Literal["re2", "java"]


class Refusal(UnsupportedError):
    """A construct of a valid PostgreSQL pattern the flavor's engine cannot run."""


_WORD = "0-9A-Za-z_"
_SPACE = "\\x{09}-\\x{0D} "
#: The POSIX classes in PostgreSQL's C locale (ASCII), as bracket contents.
_CLASSES = {
    "alpha": "A-Za-z",
    "upper": "A-Z",
    "lower": "a-z",
    "digit": "0-9",
    "alnum": "0-9A-Za-z",
    "word": _WORD,
    "xdigit": "0-9A-Fa-f",
    "space": _SPACE,
    "blank": " \\x{09}",
    "punct": "!-/:-@\\[-`{-~",
    "cntrl": "\\x{00}-\\x{1F}\\x{7F}",
    "graph": "!-~",
    "print": " -~",
}
#: Class escapes, as bracket contents (inside brackets) and negated outside.
_CLASS_ESCAPES = {"d": "0-9", "s": _SPACE, "w": _WORD}
_W = f"[{_WORD}]"
#: `\\y` (a word boundary) and `\\Y` (none): RE2's `\\b` is ASCII as PostgreSQL's C
#: locale; Java's reads letters beyond ASCII as word characters, so it is spelled out.
_BOUNDARY = {
    "re2": {"y": "\\b", "Y": "\\B"},
    "java": {
        "y": f"(?:(?<={_W})(?!{_W})|(?<!{_W})(?={_W}))",
        "Y": f"(?:(?<={_W})(?={_W})|(?<!{_W})(?!{_W}))",
    },
}
#: Character-entry escapes and their code points.
_ENTRIES = {"a": 7, "b": 8, "e": 27, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "B": 92}
_OPTION_LETTERS = set("bceimnpqstwx")


@dataclass(frozen=True, slots=True)
class Pattern:
    """A pattern in one flavor's syntax: its text, the number of capturing groups,
    whether a match's extent is PostgreSQL's (module docstring), and whether it may
    match the empty text (`nullable`: RE2's global replace skips an empty match right
    after a match, where PostgreSQL and Java replace it)."""

    text: str
    groups: int
    extent_safe: bool
    nullable: bool = False


def _invalid(reason: str) -> SchemaError:
    return SchemaError(f"invalid regular expression: {reason}")


def _code(point: int) -> str:
    return f"\\x{{{point:02X}}}"


def _literal(c: str) -> str:
    """One character as a literal of both flavors, in or out of brackets."""
    if c.isalnum() or c == "_" or ord(c) > 127:
        return c
    if c == " ":
        return " "
    if ord(c) < 32 or ord(c) == 127:
        return _code(ord(c))
    return "\\" + c


def options(pattern: str, flags: str) -> tuple[str, set[str]]:
    """The pattern without its director or leading `(?...)` options, and the options in
    force: `i` (any case), one of `s` `n` `p` `w` (newline handling; `m` is `n`), `x`
    (expanded), `q` (literal); the function's `flags` first, later letters win.

    >>> options("(?in)a.b", "")
    ('a.b', {'i', 'n'})
    """
    letters = list(flags)
    if pattern.startswith("***="):
        return pattern[4:], {"q", *({"i"} if "i" in flags else set())}
    if pattern.startswith("***:"):
        pattern = pattern[4:]
    if pattern.startswith("(?") and not pattern.startswith(("(?:", "(?=", "(?!", "(?<")):
        end = pattern.find(")")
        if end < 0:
            raise _invalid("parentheses () not balanced")
        letters += list(pattern[2:end])
        pattern = pattern[end + 1 :]
    case, newline, expanded, literal = "c", "s", False, False
    for letter in letters:
        if letter not in _OPTION_LETTERS:
            raise _invalid(f'invalid regular expression option: "{letter}"')
        if letter in "be":
            raise Refusal("basic and extended regular expressions (options b, e) are not supported")
        if letter in "ic":
            case = letter
        elif letter in "snpwm":
            newline = "n" if letter == "m" else letter
        elif letter in "xt":
            expanded = letter == "x"
        else:
            literal = True
    chosen = {newline} | ({"i"} if case == "i" else set())
    return pattern, chosen | ({"x"} if expanded else set()) | ({"q"} if literal else set())


def translate(pattern: str, flavor: Flavor, flags: str = "") -> Pattern:
    """`pattern` (PostgreSQL's, with the function's option `flags`) in `flavor`'s syntax."""
    body, chosen = options(pattern, flags)
    newline_dot = not ({"n", "p"} & chosen)
    line_anchors = bool({"n", "w"} & chosen)
    prefix = "(?" + ("i" if "i" in chosen else "") + ("s" if newline_dot else "")
    prefix += ("m" if line_anchors else "") + ")"
    prefix = "" if prefix == "(?)" else prefix
    if "q" in chosen:
        return Pattern(prefix + "".join(_literal(c) for c in body), 0, True, not body)
    reader = _Reader(body, flavor, expanded="x" in chosen, newline_bracket=not newline_dot)
    text = reader.read()
    return Pattern(prefix + text, reader.groups, reader.extent_safe(), reader.nullable())


class _Reader:
    """One pass over an ARE pattern, writing the flavor's text."""

    def __init__(self, text: str, flavor: Flavor, expanded: bool, newline_bracket: bool) -> None:
        self.s, self.k, self.flavor = text, 0, flavor
        self.expanded, self.newline_bracket = expanded, newline_bracket
        self.groups = 0
        self.depth = 0
        self.out: list[str] = []
        # What extent_safe needs: the quantifiers' greediness, whether one applies to a
        # group, whether there is an alternation.
        self.greedy: set[bool] = set()
        self.group_quantified = False
        self.alternation = False
        # Whether each open level may match empty: its finished alternatives, the
        # current one before its last atom, and that atom.
        self.levels: list[tuple[list[bool], bool, bool]] = [([], True, True)]
        self.last_atom: str | None = None  # "char" | "group" | "assert"
        self.last_wordy = False

    def read(self) -> str:
        n = len(self.s)
        while self.k < n:
            c = self.s[self.k]
            if self.expanded and c in " \t\n\r\v\f":
                self.k += 1
            elif self.expanded and c == "#":
                end = self.s.find("\n", self.k)
                self.k = n if end < 0 else end + 1
            elif c == "\\":
                self._escape()
            elif c == "[":
                self._bracket()
            elif c == "(":
                self._open()
            elif c == ")":
                if self.depth == 0:
                    raise _invalid("parentheses () not balanced")
                self.depth -= 1
                alternatives, before, last = self.levels.pop()
                self._emit(")", "group", wordy=False)
                self._atom(any(alternatives) or (before and last))
                self.k += 1
            elif c == "|":
                self.alternation = True
                alternatives, before, last = self.levels[-1]
                self.levels[-1] = ([*alternatives, before and last], True, True)
                self.out.append("|")
                self.last_atom = None
                self.k += 1
            elif c in "*+?{":
                self._quantifier()
            elif c in "^$":
                self._emit(c, "assert", wordy=False)
                self.k += 1
            elif c == ".":
                self._emit(".", "char", wordy=False)
                self.k += 1
            else:
                self._emit(_literal(c), "char", wordy=c.isalnum() or c == "_")
                self.k += 1
        if self.depth:
            raise _invalid("parentheses () not balanced")
        return "".join(self.out)

    def _emit(self, text: str, kind: str, wordy: bool, count: bool = True) -> None:
        """Write `text`, an atom of `kind` ("char", "group", "assert"; `count`: one a
        quantifier may follow), `wordy` if it matches word characters only."""
        self.out.append(text)
        if count:
            self.last_atom = kind
            if kind != "group":
                self._atom(kind == "assert")
        else:
            self._atom(True)
        self.last_wordy = wordy

    def _escape(self) -> None:
        s, k = self.s, self.k
        if k + 1 >= len(s):
            raise _invalid("invalid escape \\ sequence")
        c = s[k + 1]
        self.k = k + 2
        if c in _CLASS_ESCAPES:
            self._emit(f"[{_CLASS_ESCAPES[c]}]", "char", wordy=c in "dw")
        elif c in "DSW":
            self._emit(f"[^{_CLASS_ESCAPES[c.lower()]}]", "char", wordy=False)
        elif c == "m" or c == "M":
            self._word_edge(start=c == "m")
        elif c in "yY":
            self._emit(_BOUNDARY[self.flavor][c], "assert", wordy=False, count=False)
        elif c == "A":
            self._emit("\\A", "assert", wordy=False, count=False)
        elif c == "Z":
            self._emit("\\z", "assert", wordy=False, count=False)
        elif c.isdigit() and c != "0":
            self._backreference(c)
        elif c.isalnum():
            point = self._entry(c)
            ch = chr(point)
            self._emit(_literal(ch), "char", wordy=ch.isalnum() or ch == "_")
        else:
            self._emit(_literal(c), "char", wordy=False)

    def _entry(self, c: str) -> int:
        """The code point of a character-entry escape `\\c...` (k past `c`)."""
        s = self.s
        if c in _ENTRIES:
            return _ENTRIES[c]
        if c == "c":
            if self.k >= len(s):
                raise _invalid("invalid escape \\ sequence")
            self.k += 1
            return ord(s[self.k - 1]) & 31
        if c in "xuU0":
            digits = {"x": 8, "u": 4, "U": 8, "0": 3}[c]
            allowed = "01234567" if c == "0" else "0123456789abcdefABCDEF"
            start = self.k
            while self.k < len(s) and self.k - start < digits and s[self.k] in allowed:
                self.k += 1
            text = s[start : self.k]
            if c == "0":
                return int(text or "0", 8)
            if c in "uU" and len(text) != digits:
                raise _invalid("invalid escape \\ sequence")
            if not text:
                raise _invalid("invalid escape \\ sequence")
            return int(text, 16)
        raise _invalid("invalid escape \\ sequence")

    def _word_edge(self, start: bool) -> None:
        """`\\m` (start) or `\\M` (end of a word)."""
        if self.flavor == "java":
            text = f"(?<![{_WORD}])(?=[{_WORD}])" if start else f"(?<=[{_WORD}])(?![{_WORD}])"
            self._emit(text, "assert", wordy=False, count=False)
            return
        # RE2 has \b only: exact where the word character next to it is certain.
        following = self._next_is_wordy() if start else self.last_wordy
        if not following:
            raise Refusal(
                "\\m and \\M next to a character that may not be a word character are not "
                "supported by the in-process kernel (RE2)",
                hint="use \\y (a word boundary), or run on Spark",
            )
        self._emit("\\b", "assert", wordy=self.last_wordy, count=False)

    def _next_is_wordy(self) -> bool:
        rest = self.s[self.k :]
        return bool(rest) and (
            rest[0].isalnum() or rest[0] == "_" or rest.startswith(("\\w", "\\d"))
        )

    def _backreference(self, first: str) -> None:
        if self.flavor == "re2":
            raise Refusal(
                "back-references (\\1) are not supported by the in-process kernel (RE2)",
                hint="run on Spark, or match the repeated text another way",
            )
        number = int(first)
        if number > self.groups:
            raise _invalid("invalid backreference number")
        self._emit(f"(?:\\{number})", "group", wordy=False)
        self._atom(True)  # the group may have matched empty

    def _open(self) -> None:
        s, k = self.s, self.k
        if s.startswith("(?", k):
            kind = next(
                (p for p in ("(?:", "(?=", "(?!", "(?<=", "(?<!") if s.startswith(p, k)), None
            )
            if kind is None:
                raise _invalid("quantifier operand invalid")
            if kind != "(?:" and self.flavor == "re2":
                raise Refusal(
                    "lookahead and lookbehind are not supported by the in-process kernel (RE2)",
                    hint="run on Spark, or test the condition with a second ~",
                )
            self.out.append(kind)
            self.k = k + len(kind)
        else:
            self.groups += 1
            self.out.append("(")
            self.k = k + 1
        self.depth += 1
        self.levels.append(([], True, True))
        self.last_atom = None

    def _quantifier(self) -> None:
        s, k = self.s, self.k
        c = s[k]
        if c == "{":
            end = s.find("}", k)
            bound = s[k + 1 : end] if end > 0 else ""
            low, _, high = bound.partition(",")
            if end < 0 or not low.isdigit() or (high and not high.isdigit()):
                self._emit("\\{", "char", wordy=False)
                self.k = k + 1
                return
            if int(low) > 255 or (high and int(high) > 255):
                raise _invalid("invalid repetition count(s)")
            if high and int(high) < int(low):
                raise _invalid("invalid repetition count(s)")
            text = s[k : end + 1]
            self.k = end + 1
        else:
            text = c
            self.k = k + 1
        if self.last_atom is None:
            raise _invalid("quantifier operand invalid")
        lazy = self.k < len(s) and s[self.k] == "?"
        if lazy:
            text += "?"
            self.k += 1
        self.greedy.add(not lazy)
        if self.last_atom == "group":
            self.group_quantified = True
        if self.last_atom == "assert":
            raise _invalid("quantifier operand invalid")
        self.out.append(text)
        if text[0] in "*?" or text.startswith(("{0}", "{0,")):
            alternatives, before, _ = self.levels[-1]
            self.levels[-1] = (alternatives, before, True)
        self.last_atom = "quantified"

    def _bracket(self) -> None:
        s, n = self.s, len(self.s)
        k = self.k + 1
        negated = k < n and s[k] == "^"
        k += negated
        parts: list[str] = []
        first = True
        while True:
            if k >= n:
                raise _invalid("brackets [] not balanced")
            c = s[k]
            if c == "]" and not first:
                k += 1
                break
            first = False
            if s.startswith("[:", k):
                end = s.find(":]", k + 2)
                name = s[k + 2 : end] if end > 0 else ""
                if name in ("<", ">"):
                    raise _invalid("invalid character class")
                if name not in _CLASSES:
                    raise _invalid("invalid character class")
                parts.append(_CLASSES[name])
                k = end + 2
            elif s.startswith(("[.", "[="), k):
                close = s[k + 1] + "]"
                end = s.find(close, k + 2)
                inner = s[k + 2 : end] if end > 0 else ""
                if len(inner) != 1:
                    raise _invalid("invalid collating element")
                parts.append(_literal(inner))
                k = end + 2
            elif c == "\\" and k + 1 < n:
                e = s[k + 1]
                if e in _CLASS_ESCAPES:
                    parts.append(_CLASS_ESCAPES[e])
                    k += 2
                elif e in "DSW":
                    raise _invalid("invalid escape \\ sequence")
                elif e.isalnum():
                    self.k = k + 2
                    point = self._entry(e)
                    k = self.k
                    parts.append(_literal(chr(point)))
                else:
                    parts.append(_literal(e))
                    k += 2
            else:
                parts.append(_literal(c) if c != "-" else "-")
                k += 1
        self.k = k
        text = "".join(parts)
        if text.startswith("-"):
            text = "\\-" + text[1:]
        if text.endswith("-") and not text.endswith("\\-"):
            text = text[:-1] + "\\-"
        if negated and self.newline_bracket:
            text += "\\x{0A}"
        whole = f"[{'^' if negated else ''}{text}]"
        self._emit(whole, "char", wordy=not negated and _all_wordy(text))

    def _atom(self, nullable: bool) -> None:
        """Record the next atom of the current level, and whether it may match empty."""
        alternatives, before, last = self.levels[-1]
        self.levels[-1] = (alternatives, before and last, nullable)

    def nullable(self) -> bool:
        alternatives, before, last = self.levels[-1]
        return any(alternatives) or (before and last)

    def extent_safe(self) -> bool:
        # PostgreSQL counts an alternation as greedy.
        greedy = self.greedy | ({True} if self.alternation else set())
        if self.group_quantified or len(greedy) > 1:
            return False
        if not self.alternation:
            return True
        return _literal_alternatives("".join(self.out))


def _all_wordy(bracket: str) -> bool:
    """Whether every character a bracket's contents `bracket` admits is a word character
    (conservatively: its text holds only word characters and ranges of them)."""
    return all(c.isalnum() or c in "_-" for c in bracket)


def _literal_alternatives(text: str) -> bool:
    """Whether the alternations in a written pattern `text` are between literal texts none
    of which starts another, in any case (conservatively: alternatives of letters, digits
    and spaces, inside one level of parentheses, or the whole pattern's without any).

    >>> _literal_alternatives("(cat|dog)s"), _literal_alternatives("a|ab")
    (True, False)
    """
    if "(" not in text:
        return _prefix_free(text.split("|"))
    depth = 0
    current = ""
    pieces: list[str] = []
    for c in text:
        if c == "(":
            depth += 1
            if depth > 1:
                return False
            pieces, current = [], ""
        elif c == ")":
            depth -= 1
            if not _prefix_free([*pieces, current]):
                return False
        elif c == "|":
            if depth == 0:
                return False  # top-level alternatives hold the whole pattern's atoms
            pieces.append(current)
            current = ""
        elif depth > 0:
            current += c
    return True


def _prefix_free(alternatives: list[str]) -> bool:
    """Whether each alternative is literal (letters, digits, spaces), not empty, and
    starts no other, ignoring case."""
    lowered = [a.lower() for a in alternatives]
    if len(lowered) == 1:
        return True
    if not all(a and all(c.isalnum() or c == " " for c in a) for a in lowered):
        return False
    return not any(a != b and b.startswith(a) for a in lowered for b in lowered) and len(
        set(lowered)
    ) == len(lowered)


def similar_to_are(pattern: str, escape: str | None = "\\") -> str:
    """A SQL `SIMILAR TO` pattern as the ARE PostgreSQL matches it (`similar_to_escape`):
    `%` any text, `_` any character, `|`, `*`, `+`, `?`, `{m,n}`, `(...)` and brackets
    as in AREs, other ARE metacharacters literal, `escape` quoting the next character;
    anchored at both ends.

    >>> similar_to_are("a%(b|c)_.")
    '^(?:a.*(?:b|c).\\\\.)$'
    """
    out: list[str] = []
    k, n = 0, len(pattern)
    in_bracket = False
    while k < n:
        c = pattern[k]
        if escape and c == escape:
            if k + 1 >= n:
                raise SchemaError(
                    "invalid escape string", hint="escape string must be empty or one character"
                )
            out.append(_literal(pattern[k + 1]))
            k += 2
            continue
        if in_bracket:
            out.append(c)
            if c == "]":
                in_bracket = False
        elif c == "[":
            in_bracket = True
            out.append(c)
            if pattern.startswith("^", k + 1):
                out.append("^")
                k += 1
            if pattern.startswith("]", k + 1):
                out.append("\\]")
                k += 1
        elif c == "%":
            out.append(".*")
        elif c == "_":
            out.append(".")
        elif c == "(":
            out.append("(?:")
        elif c in "|*+?{}),0123456789":
            out.append(c)
        elif c in ".^$\\":
            out.append("\\" + c)
        else:
            out.append(c)
        k += 1
    return "^(?:" + "".join(out) + ")$"


__all__ = ["Flavor", "Pattern", "Refusal", "options", "similar_to_are", "translate"]
