"""Recursive-descent parser of the SQL92 selector language (as in RocketMQ).

Grammar, lowest precedence first (``NOT`` binds tighter than comparisons)::

    selector       := orExpr EOF
    orExpr         := andExpr ( OR andExpr )*
    andExpr        := equalityExpr ( AND equalityExpr )*
    equalityExpr   := comparisonExpr ( "=" comparisonExpr | "<>" comparisonExpr
                                     | IS [NOT] NULL )*
    comparisonExpr := unaryExpr ( (">"|">="|"<"|"<=") unaryExpr
                                | [NOT] (CONTAINS|STARTSWITH|ENDSWITH) string
                                | [NOT] BETWEEN unaryExpr AND unaryExpr
                                | [NOT] IN "(" string ("," string)* ")" )*
    unaryExpr      := "+" unaryExpr | "-" unaryExpr | NOT unaryExpr | primary
    primary        := literal | identifier | "(" orExpr ")"

The parse-time checks are RocketMQ's (operands that cannot be compared, a
non-boolean selector, ``BETWEEN`` bounds out of order, ...). Unlike RocketMQ,
tokens after a complete expression are an error and ``0.0`` is a valid literal.
"""

from __future__ import annotations

from broker_core.errors import FilterSyntaxError
from broker_core.filter.lexer import T, Token, line_col, tokenize
from broker_core.filter.nodes import (
    BOOLEAN,
    DOUBLE,
    INTEGER,
    LONG,
    NULL,
    STRING,
    And,
    BoolCast,
    Cmp,
    Const,
    Eq,
    In,
    IsNull,
    Neg,
    Node,
    Not,
    Or,
    Prop,
    StrOp,
    is_boolean,
    render,
)

#: Parentheses and unary operators nest at most this deep (keeps the parser's
#: recursion and the generated code's indentation bounded).
MAX_NESTING = 64
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1
_CMP_OPS = frozenset((">", ">=", "<", "<="))
_STR_OPS = {"CONTAINS": "contains", "STARTSWITH": "startswith", "ENDSWITH": "endswith"}
_AFTER_NOT = "BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH"
_OPERAND = "identifier, literal, '(' , '+', '-' or NOT"


#: An expression longer than this is refused before it is read: parsing and
#: compiling cost grows with its length (100,000 terms took seconds), and no
#: subscription needs more.
MAX_EXPRESSION_LENGTH = 16 * 1024


def parse(text: str) -> Node:
    """Parse ``text`` into a boolean expression tree.

    Raises ``FilterSyntaxError`` (with ``position`` and ``expected``) for
    lexical, grammatical and parse-time semantic errors, and for an expression
    longer than ``MAX_EXPRESSION_LENGTH`` characters.
    """
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise FilterSyntaxError(
            f"the expression is {len(text):,} characters long; at most "
            f"{MAX_EXPRESSION_LENGTH:,} are allowed",
            MAX_EXPRESSION_LENGTH,
        )
    return _Parser(text).parse_selector()


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.depth = 0

    # -- token helpers -------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def is_kw(self, word: str, tok: Token | None = None) -> bool:
        t = self.tok if tok is None else tok
        return t.kind is T.KEYWORD and t.text == word

    def is_punct(self, text: str) -> bool:
        return self.tok.kind is T.PUNCT and self.tok.text == text

    def advance(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def error(self, message: str, pos: int, expected: str) -> FilterSyntaxError:
        line, col = line_col(self.text, pos)
        return FilterSyntaxError(
            f"{message} at position {pos} (line {line}, column {col}); "
            f"expected {expected}",
            pos,
            expected,
        )

    def unexpected(self, expected: str) -> FilterSyntaxError:
        return self.error(f"unexpected {self.tok.describe()}", self.tok.pos, expected)

    def expect_punct(self, text: str) -> Token:
        if not self.is_punct(text):
            raise self.unexpected(f"'{text}'")
        return self.advance()

    def expect_string(self) -> Token:
        if self.tok.kind is not T.STRING:
            raise self.unexpected("string literal")
        return self.advance()

    # -- checks (RocketMQ's parse-time rules) ----------------------------------
    def as_boolean(self, node: Node) -> Node:
        if is_boolean(node):
            return node
        if isinstance(node, Prop):
            return BoolCast(node, node.pos)
        raise self.error(
            f"expression {render(node)} will not result in a boolean value",
            node.pos,
            "a condition",
        )

    def check_equal_operand(self, node: Node) -> None:
        if isinstance(node, Const) and node.jtype == NULL:
            raise self.error(
                "'NULL' cannot be compared with '=' or '<>'",
                node.pos,
                "a value other than NULL (use IS NULL / IS NOT NULL)",
            )

    def check_equal_compatible(self, left: Node, right: Node) -> None:
        if (
            isinstance(left, Const)
            and isinstance(right, Const)
            and is_boolean(left)
            and not is_boolean(right)
        ):
            raise self.error(
                f"{render(left)} cannot be compared with {render(right)}",
                right.pos,
                "TRUE or FALSE",
            )

    def check_ordered_operand(self, node: Node) -> None:
        if isinstance(node, Const):
            if node.jtype in (INTEGER, LONG, DOUBLE):
                return
        elif not is_boolean(node):
            return
        raise self.error(
            f"value {render(node)} cannot be compared with '>', '>=', '<', '<='",
            node.pos,
            "a number or a property",
        )

    # -- grammar ---------------------------------------------------------------
    def parse_selector(self) -> Node:
        node = self.as_boolean(self.parse_or())
        if self.tok.kind is not T.EOF:
            if self.is_punct(")"):
                raise self.error("unbalanced ')'", self.tok.pos, "end of expression")
            raise self.unexpected("AND, OR, an operator or end of expression")
        return node

    def parse_or(self) -> Node:
        left = self.parse_and()
        while self.is_kw("OR"):
            pos = self.advance().pos
            right = self.parse_and()
            left = Or(self.as_boolean(left), self.as_boolean(right), pos)
        return left

    def parse_and(self) -> Node:
        left = self.parse_equality()
        while self.is_kw("AND"):
            pos = self.advance().pos
            right = self.parse_equality()
            left = And(self.as_boolean(left), self.as_boolean(right), pos)
        return left

    def parse_equality(self) -> Node:
        left = self.parse_comparison()
        while True:
            if self.is_punct("=") or self.is_punct("<>"):
                op = self.advance()
                right = self.parse_comparison()
                self.check_equal_operand(left)
                self.check_equal_operand(right)
                self.check_equal_compatible(left, right)
                eq = Eq(left, right, op.pos)
                left = eq if op.text == "=" else Not(eq, op.pos)
            elif self.is_kw("IS"):
                pos = self.advance().pos
                negated = False
                if self.is_kw("NOT"):
                    self.advance()
                    negated = True
                if not self.is_kw("NULL"):
                    raise self.unexpected("NULL" if negated else "NULL or NOT NULL")
                self.advance()
                left = IsNull(left, pos)
                if negated:
                    left = Not(left, pos)
            else:
                return left

    def parse_comparison(self) -> Node:
        left = self.parse_unary()
        while True:
            tok = self.tok
            if tok.kind is T.PUNCT and tok.text in _CMP_OPS:
                self.advance()
                right = self.parse_unary()
                self.check_ordered_operand(left)
                self.check_ordered_operand(right)
                left = Cmp(tok.text, left, right, tok.pos)
                continue
            negated = False
            if self.is_kw("NOT"):
                nxt = self.peek()
                if nxt.kind is not T.KEYWORD or nxt.text not in (
                    "BETWEEN",
                    "IN",
                    *_STR_OPS,
                ):
                    self.advance()
                    raise self.unexpected(_AFTER_NOT)
                self.advance()
                negated = True
                tok = self.tok
            if tok.kind is not T.KEYWORD:
                return left
            if tok.text in _STR_OPS:
                self.advance()
                arg = self.expect_string().text
                left = StrOp(_STR_OPS[tok.text], left, arg, negated, tok.pos)
            elif tok.text == "BETWEEN":
                left = self.parse_between(left, negated, tok.pos)
            elif tok.text == "IN":
                left = self.parse_in(left, negated, tok.pos)
            else:
                return left

    def parse_between(self, value: Node, negated: bool, pos: int) -> Node:
        self.advance()
        low = self.parse_unary()
        if not self.is_kw("AND"):
            raise self.unexpected("AND")
        self.advance()
        high = self.parse_unary()
        for node in (value, low, high):
            self.check_ordered_operand(node)
        if isinstance(low, Const) and isinstance(high, Const):
            assert isinstance(low.value, int | float) and isinstance(
                high.value, int | float
            )
            if low.value > high.value:
                raise self.error(
                    f"illegal values of BETWEEN: the lower bound {render(low)} "
                    f"is greater than the upper bound {render(high)}",
                    low.pos,
                    f"a lower bound <= {render(high)}",
                )
        if negated:
            return Or(Cmp("<", value, low, pos), Cmp(">", value, high, pos), pos)
        return And(Cmp(">=", value, low, pos), Cmp("<=", value, high, pos), pos)

    def parse_in(self, value: Node, negated: bool, pos: int) -> Node:
        self.advance()
        if not isinstance(value, Prop):
            raise self.error(
                f"IN needs a property on its left, not {render(value)}",
                value.pos,
                "a property name before IN",
            )
        self.expect_punct("(")
        values = [self.expect_string().text]
        while self.is_punct(","):
            self.advance()
            values.append(self.expect_string().text)
        if not self.is_punct(")"):
            raise self.unexpected("',' or ')'")
        self.advance()
        return In(value, frozenset(values), negated, pos)

    def parse_unary(self) -> Node:
        self.depth += 1
        try:
            if self.depth > MAX_NESTING:
                raise self.error(
                    f"expression nested more than {MAX_NESTING} levels deep",
                    self.tok.pos,
                    "less nesting of parentheses and unary operators",
                )
            return self._unary()
        finally:
            self.depth -= 1

    def _unary(self) -> Node:
        tok = self.tok
        if tok.kind is T.PUNCT and tok.text == "+":
            self.advance()
            return self.parse_unary()
        if tok.kind is T.PUNCT and tok.text == "-":
            self.advance()
            operand = self.parse_unary()
            if isinstance(operand, Const) and operand.jtype in (INTEGER, LONG, DOUBLE):
                assert isinstance(operand.value, int | float)
                return Const(-operand.value, operand.jtype, tok.pos)
            return Neg(operand, tok.pos)
        if self.is_kw("NOT"):
            self.advance()
            return Not(self.as_boolean(self.parse_unary()), tok.pos)
        return self.parse_primary()

    def parse_primary(self) -> Node:
        tok = self.tok
        kind = tok.kind
        if kind is T.ID:
            self.advance()
            return Prop(tok.text, tok.pos)
        if kind is T.STRING:
            self.advance()
            return Const(tok.text, STRING, tok.pos)
        if kind is T.DECIMAL:
            self.advance()
            return self.decimal(tok)
        if kind is T.FLOAT:
            self.advance()
            return self.floating(tok)
        if kind is T.KEYWORD and tok.text in ("TRUE", "FALSE"):
            self.advance()
            return Const(tok.text == "TRUE", BOOLEAN, tok.pos)
        if kind is T.KEYWORD and tok.text == "NULL":
            self.advance()
            return Const(None, NULL, tok.pos)
        if kind is T.PUNCT and tok.text == "(":
            self.advance()
            node = self.parse_or()
            if not self.is_punct(")"):
                raise self.unexpected("')', AND, OR or an operator")
            self.advance()
            return node
        raise self.unexpected(_OPERAND)

    def decimal(self, tok: Token) -> Const:
        value = int(tok.text.rstrip("lL"))
        if value > _LONG_MAX:
            raise self.error(
                f"integer literal {tok.text} is out of the range of a long",
                tok.pos,
                f"an integer <= {_LONG_MAX}",
            )
        return Const(value, INTEGER if value <= _INT_MAX else LONG, tok.pos)

    def floating(self, tok: Token) -> Const:
        value = float(tok.text)
        if value == float("inf"):
            raise self.error(
                f"floating-point literal {tok.text} is greater than "
                "1.7976931348623157E308",
                tok.pos,
                "a finite floating-point number",
            )
        return Const(value, DOUBLE, tok.pos)
