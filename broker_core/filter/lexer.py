"""Tokenizer of the SQL92 selector language (RocketMQ ``SelectorParser.jj``).

Keywords are case-insensitive; identifiers are ``[a-zA-Z_$][a-zA-Z0-9_$]*``;
comments are ``-- ...`` to the end of the line (or of the input) and
``/* ... */``. Positions are 0-based character offsets into the expression.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from broker_core.errors import FilterSyntaxError


class T(Enum):
    """Token kinds."""

    ID = "identifier"
    STRING = "string literal"
    DECIMAL = "integer literal"
    FLOAT = "floating-point literal"
    KEYWORD = "keyword"
    PUNCT = "punctuation"
    EOF = "end of expression"


KEYWORDS = frozenset(
    "NOT AND OR BETWEEN IN TRUE FALSE NULL IS CONTAINS STARTSWITH ENDSWITH".split()
)


@dataclass(frozen=True, slots=True)
class Token:
    kind: T
    #: Keywords upper-cased; string literals unquoted; numbers as written.
    text: str
    pos: int

    def describe(self) -> str:
        """Return the token as an error message shows it."""
        if self.kind is T.EOF:
            return "end of expression"
        if self.kind is T.STRING:
            return "'" + self.text.replace("'", "''") + "'"
        return self.text


# Order matters: longest literal forms first. The float rule follows the
# grammar's three alternatives; DECIMAL is 0 | [1-9][0-9]*, so "010" lexes as
# "0" then "10" exactly as in RocketMQ (the trailing "10" is then an error).
_TOKEN_RE = re.compile(
    r"""
    (?P<ws>[ \t\n\r\f]+)
  | (?P<line_comment>--[^\n\r]*(?:\r\n|\n|\r|\Z))
  | (?P<block_comment>/\*.*?\*/)
  | (?P<float>(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?
               |\.[0-9]+(?:[eE][+-]?[0-9]+)?
               |[0-9]+[eE][+-]?[0-9]+))
  | (?P<decimal>(?:0|[1-9][0-9]*)[lL]?)
  | (?P<string>'(?:''|[^'])*')
  | (?P<id>[a-zA-Z_$][a-zA-Z0-9_$]*)
  | (?P<punct><>|>=|<=|[=><(),+\-])
    """,
    re.VERBOSE | re.DOTALL,
)


def line_col(text: str, pos: int) -> tuple[int, int]:
    """Return the 1-based line and column of offset ``pos`` in ``text``."""
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens, ending with an EOF token.

    Raises ``FilterSyntaxError`` at the first character that starts no token
    (including an unterminated string literal or block comment).
    """
    tokens: list[Token] = []
    pos, end = 0, len(text)
    match = _TOKEN_RE.match
    while pos < end:
        m = match(text, pos)
        if m is None:
            raise _lex_error(text, pos)
        kind = m.lastgroup
        value = m.group()
        if kind == "id":
            upper = value.upper()
            if upper in KEYWORDS:
                tokens.append(Token(T.KEYWORD, upper, pos))
            else:
                tokens.append(Token(T.ID, value, pos))
        elif kind == "string":
            tokens.append(Token(T.STRING, value[1:-1].replace("''", "'"), pos))
        elif kind == "decimal":
            tokens.append(Token(T.DECIMAL, value, pos))
        elif kind == "float":
            tokens.append(Token(T.FLOAT, value, pos))
        elif kind == "punct":
            tokens.append(Token(T.PUNCT, value, pos))
        pos = m.end()
    tokens.append(Token(T.EOF, "", end))
    return tokens


def _lex_error(text: str, pos: int) -> FilterSyntaxError:
    ch = text[pos]
    line, col = line_col(text, pos)
    where = f"at position {pos} (line {line}, column {col})"
    if ch == "'":
        return FilterSyntaxError(
            f"unterminated string literal {where}", pos, "closing quote (')"
        )
    if text.startswith("/*", pos):
        return FilterSyntaxError(f"unterminated comment {where}", pos, "*/")
    if ch == '"':
        return FilterSyntaxError(
            f"double-quoted strings are not supported {where}; use 'single quotes'",
            pos,
            "string literal in single quotes",
        )
    return FilterSyntaxError(
        f"unexpected character {ch!r} {where}",
        pos,
        "identifier, literal, operator, '(' or ')'",
    )
