"""Source text: statements split at `;`, and the masked view of a fragment the grammar reads.

The lark grammar never sees raw SQL. sqlglot's PostgreSQL tokenizer finds the strings,
quoted identifiers, comments and parentheses; a `Fragment` (a slice of the input)
is then shown to lark *masked*, with the same length so offsets carry over:

- comments and whitespace become spaces (newlines kept);
- a string becomes `'` + `\\x01`... + `'`, a quoted identifier `"` + `\\x02`... + `"`;
- the inside of every outermost `(...)` or `[...]` becomes `\\x00`....

So a keyword the grammar finds in the masked text is a real keyword at the fragment's
top level, never one inside a string, a comment or a nested query; a parenthesized
part is one opaque GROUP token whose inside is parsed later, as its own fragment, by the
rule that knows what it holds. Offsets into the masked text are offsets into the input,
and `Source.position` turns them into 1-based (line, column) pairs of the whole input.

>>> src = Source("SELECT ';' -- c\\n; SELECT (1)")
>>> [src.text[f.start:f.end] for f in src.statements()]
["SELECT ';'", 'SELECT (1)']
>>> src.statements()[1].masked
'SELECT (\\x00)'
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from dsql.errors import ParseError


class _Tokenizer(Postgres.Tokenizer):
    """PostgreSQL's tokenizer without "command" keywords (SHOW, FETCH, ...), after which
    sqlglot would read the rest of the statement as one string."""

    COMMANDS: ClassVar[set[TokenType]] = set()


_STRINGS = frozenset(
    {
        TokenType.STRING,
        TokenType.BIT_STRING,
        TokenType.BYTE_STRING,
        TokenType.HEX_STRING,
        TokenType.HEREDOC_STRING,
        TokenType.NATIONAL_STRING,
        TokenType.RAW_STRING,
        TokenType.UNICODE_STRING,
    }
)
#: A CREATE SECRET statement, whose string no error message may show.
_CREATE_SECRET = re.compile(r"\s*create\s+secret\b", re.IGNORECASE)

_OPEN = {TokenType.L_PAREN: TokenType.R_PAREN, TokenType.L_BRACKET: TokenType.R_BRACKET}
_CLOSE = frozenset(_OPEN.values())


class Source:
    """The whole input: its text, its tokens, and offset -> (line, column) mapping."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._line_starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
        self.tokens: list[Token] = self._tokenize()

    def position(self, offset: int) -> tuple[int, int]:
        """The 1-based (line, column) of a 0-based offset (the end of text allowed)."""
        offset = min(max(offset, 0), len(self.text))
        line = bisect.bisect_right(self._line_starts, offset)
        return line, offset - self._line_starts[line - 1] + 1

    def error(
        self, message: str, offset: int, statement: tuple[int, int] | None, hint: str | None
    ) -> ParseError:
        """A ParseError at `offset`, quoting the statement spanning `statement` offsets."""
        text = self.text[statement[0] : statement[1]] if statement else self.text
        origin = self.position(statement[0]) if statement else (1, 1)
        for literal in self._secrets(statement or (0, len(self.text))):
            masked = re.sub(r"[^'\n]", "*", literal)  # same length: the caret stays
            text = text.replace(literal, masked)
            message = message.replace(literal, masked)
            hint = hint.replace(literal, masked) if hint else hint
        return ParseError(
            message, statement=text, position=self.position(offset), hint=hint, origin=origin
        )

    def _secrets(self, span: tuple[int, int]) -> list[str]:
        """The string literals of a CREATE SECRET in `span` (as written, quotes included),
        which no error message may show."""
        if not hasattr(self, "tokens"):  # a string that never ends: all of it from its quote
            text = self.text[span[0] : span[1]]
            quote = text.find("'")
            secret = _CREATE_SECRET.match(text) is not None and quote >= 0
            return [text[quote:]] if secret else []
        inside = [t for t in self.tokens if span[0] <= t.start < span[1]]
        words = [t.text.upper() for t in inside[:2]]
        if words != ["CREATE", "SECRET"]:
            return []
        strings = [t for t in inside if t.token_type == TokenType.STRING]
        return [self.text[t.start : t.end + 1] for t in strings]

    def statements(self) -> list[Fragment]:
        """The non-empty statements, split at top-level `;`, without the `;`."""
        out: list[Fragment] = []
        run: list[Token] = []
        for token in [*self.tokens, None]:
            if token is None or token.token_type == TokenType.SEMICOLON:
                if run:
                    span = (run[0].start, run[-1].end + 1)
                    out.append(Fragment(self, span[0], span[1], tuple(run), span))
                run = []
            else:
                run.append(token)
        return out

    def _tokenize(self) -> list[Token]:
        tokenizer = _Tokenizer()
        try:
            return tokenizer.tokenize(self.text)
        except TokenError as e:
            # The tokenizer stops at the start of the token it could not finish.
            core = getattr(tokenizer, "_core", None)
            start = getattr(core, "_start", None)
            offset = start if isinstance(start, int) else (e.start or 0)
            quote = self.text[offset : offset + 1]
            hint = (
                f"close the {quote!r} that starts here"
                if quote in {"'", '"', "$"}
                else "close the string or comment that starts here"
            )
            raise self.error("unterminated text", offset, None, hint) from None


@dataclass(frozen=True)
class Fragment:
    """A slice `[start, end)` of the source with its tokens, read by one grammar rule.

    `statement` is the span of the enclosing statement (for error messages).
    """

    source: Source
    start: int
    end: int
    tokens: tuple[Token, ...]
    statement: tuple[int, int]

    @property
    def text(self) -> str:
        """The original text of the fragment."""
        return self.source.text[self.start : self.end]

    @property
    def masked(self) -> str:
        """The text lark reads: same length, opaque strings, comments and inner groups."""
        return self._layout[0]

    def inside(self, offset: int) -> Fragment:
        """The fragment inside the group whose opener is at absolute `offset`."""
        close = self._layout[1][offset]
        tokens = tuple(t for t in self.tokens if offset < t.start and t.end < close)
        return Fragment(self.source, offset + 1, close, tokens, self.statement)

    def slice(self, lo: int, hi: int) -> str:
        """The original text between absolute offsets, stripped of outer whitespace."""
        return self.source.text[lo:hi].strip()

    def error_at(self, offset: int, message: str, hint: str | None = None) -> ParseError:
        """A ParseError at absolute `offset`, quoting this fragment's statement."""
        return self.source.error(message, offset, self.statement, hint)

    @cached_property
    def _layout(self) -> tuple[str, dict[int, int]]:
        """The masked text, and each outermost group's opener offset -> closer offset."""
        text = self.text
        chars = [ch if ch == "\n" else " " for ch in text]
        groups: dict[int, int] = {}
        stack: list[Token] = []
        for token in self.tokens:
            lo, hi = token.start - self.start, token.end + 1 - self.start
            kind = token.token_type
            if kind in _OPEN:
                stack.append(token)
                chars[lo] = text[lo] if len(stack) == 1 else "\x00"
            elif kind in _CLOSE:
                if not stack or _OPEN[stack[-1].token_type] != kind:
                    hint = "remove it or add the bracket it closes"
                    raise self.error_at(token.start, f"unmatched {token.text!r}", hint)
                opener = stack.pop().start - self.start
                if not stack:
                    groups[opener + self.start] = token.start
                    chars[opener + 1 : lo] = "\x00" * (lo - opener - 1)
                    chars[lo] = text[lo]
            elif stack:
                continue
            elif kind in _STRINGS:
                chars[lo:hi] = "'" + "\x01" * (hi - lo - 2) + "'"
            elif kind == TokenType.IDENTIFIER:
                chars[lo:hi] = '"' + "\x02" * (hi - lo - 2) + '"'
            else:
                chars[lo:hi] = text[lo:hi]
        if stack:
            opener_token = stack[-1]
            hint = "close it before the end of the statement"
            raise self.error_at(opener_token.start, f"unmatched {opener_token.text!r}", hint)
        return "".join(chars), groups
