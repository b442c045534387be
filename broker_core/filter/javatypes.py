"""Java value semantics the selector needs: parsing and comparison.

A property value is a Java ``String`` (the broker stores every property as a
string) or, in typed contexts such as the console's search over system
fields, an ``int`` (Java ``Integer`` when it fits 32 bits, else ``Long``),
``float`` (``Double``) or ``bool`` (``Boolean``). Comparisons follow
RocketMQ's ``ComparisonExpression.compare``: a string compared with a number
or boolean is parsed into the other operand's type (``Integer.valueOf``,
``Long.valueOf``, ``Double.valueOf``, ``Boolean.valueOf``); a failed parse is a
``FilterEvaluationError``.
"""

from __future__ import annotations

import math
import re
import struct
import unicodedata

from broker_core.errors import FilterEvaluationError

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

# Java type ranks used by ``compare``; ``str`` and ``bool`` are kept apart.
_S, _B, _I, _L, _D = "String", "Boolean", "Integer", "Long", "Double"

# Double.valueOf grammar (FloatingDecimal.readJavaFormatString): ASCII digits,
# optional f/F/d/D suffix, NaN/Infinity case-sensitive, hex with a p exponent.
_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity"
    r"|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?"
    r"|0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?)"
)
# String.trim() removes every char <= U+0020 from both ends.
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))
_PACK_D = struct.Struct(">d")
_UNPACK_Q = struct.Struct(">q")


def jtype(value: object) -> str:
    """Return the Java type name of a property or literal value."""
    cls = value.__class__
    if cls is str:
        return _S
    if cls is bool:
        return _B
    if cls is int:
        return _I if INT_MIN <= value <= INT_MAX else _L  # type: ignore[operator]
    if cls is float:
        return _D
    if isinstance(value, str):
        return _S
    if isinstance(value, bool):
        return _B
    if isinstance(value, int):
        return _I if INT_MIN <= value <= INT_MAX else _L
    if isinstance(value, float):
        return _D
    raise FilterEvaluationError(
        f"unsupported property value {value!r} of type {type(value).__name__}"
    )


def _parse_error(text: str, java_type: str) -> FilterEvaluationError:
    return FilterEvaluationError(f"cannot convert {text!r} to {java_type}")


def _parse_integral(text: str, lo: int, hi: int, java_type: str) -> int:
    # parseInt/parseLong: optional sign, then Unicode decimal digits
    # (Character.digit), no blanks or underscores, which int() would accept.
    body = text[1:] if text[:1] in ("+", "-") and len(text) > 1 else text
    if body.isdecimal():
        try:
            value = int(text)
        except ValueError:
            # Python's int() refuses over 4300 digits; leading zeros are legal.
            sign = -1 if text[0] == "-" else 1
            digits = "".join(str(unicodedata.digit(c)) for c in body).lstrip("0")
            if len(digits) > 20:
                raise _parse_error(text, java_type) from None
            value = sign * int(digits or "0")
        if lo <= value <= hi:
            return value
    raise _parse_error(text, java_type)


def java_int(text: str) -> int:
    """Return ``Integer.valueOf(text)``; raise ``FilterEvaluationError`` if invalid."""
    if text.isdigit() and len(text) < 10 and text.isascii():
        return int(text)
    return _parse_integral(text, INT_MIN, INT_MAX, "Integer")


def java_long(text: str) -> int:
    """Return ``Long.valueOf(text)``; raise ``FilterEvaluationError`` if invalid."""
    return _parse_integral(text, LONG_MIN, LONG_MAX, "Long")


def java_double(text: str) -> float:
    """Return ``Double.valueOf(text)``; raise ``FilterEvaluationError`` if invalid."""
    s = text.strip(_JAVA_TRIM)
    if _JAVA_DOUBLE.fullmatch(s) is None:
        raise _parse_error(text, "Double")
    if s[-1] in "fFdD" and "nfinity" not in s:
        s = s[:-1]
    if "x" in s or "X" in s:
        return float.fromhex(s)
    return float(s)


def java_bool(text: str) -> bool:
    """Return ``Boolean.valueOf(text)``: true iff ``text`` is "true" ignoring case."""
    return len(text) == 4 and text.lower() == "true"


def double_compare(x: float, y: float) -> int:
    """Return ``Double.compare(x, y)``: NaN above everything, -0.0 below 0.0."""
    if x < y:
        return -1
    if x > y:
        return 1
    # Equal or NaN: order by the canonical bits, as Java does.
    bx = _UNPACK_Q.unpack(_PACK_D.pack(math.nan if x != x else x))[0]
    by = _UNPACK_Q.unpack(_PACK_D.pack(math.nan if y != y else y))[0]
    return (bx > by) - (bx < by)


_PARSERS = {_B: java_bool, _I: java_int, _L: java_long, _D: java_double}


def compare(lv: object, rv: object) -> int:
    """Return the sign of comparing two non-null values the Java way.

    Same types compare directly; numbers widen (Integer -> Long -> Double); a
    String is parsed into the other side's type (either side; RocketMQ throws
    ClassCastException for Boolean-left vs String-right, fixed here); any
    other mix (Boolean vs number) returns -1 as RocketMQ does.
    """
    lt = jtype(lv)
    rt = jtype(rv)
    if lt != rt:
        if lt is _S:
            lv = _PARSERS[rt](lv)  # type: ignore[arg-type]
            lt = rt
        elif rt is _S:
            rv = _PARSERS[lt](rv)  # type: ignore[arg-type]
        elif lt is _B or rt is _B:
            return -1
        elif lt is _D or rt is _D:
            lv = float(lv)  # type: ignore[arg-type]
            rv = float(rv)  # type: ignore[arg-type]
            lt = _D
    if lt is _D:
        return double_compare(lv, rv)  # type: ignore[arg-type]
    return (lv > rv) - (lv < rv)  # type: ignore[operator]


def equal(lv: object, rv: object) -> bool | None:
    """Return the value of ``lv = rv`` (three-valued, RocketMQ's EqualExpression).

    Exactly one side null: NULL if the left is null, FALSE if the right is;
    both null: TRUE.
    """
    if lv is None:
        return True if rv is None else None
    if rv is None:
        return False
    return compare(lv, rv) == 0


def ordered(op: str, lv: object, rv: object) -> bool | None:
    """Return the value of ``lv op rv`` for ``>``, ``>=``, ``<``, ``<=``.

    Either side null gives NULL; two strings are both parsed as doubles.
    """
    if lv is None or rv is None:
        return None
    if jtype(lv) is _S and jtype(rv) is _S:
        try:
            c = double_compare(java_double(lv), java_double(rv))  # type: ignore[arg-type]
        except FilterEvaluationError:
            raise FilterEvaluationError(
                f"it is illegal to compare strings by {op!r}: lv={lv!r}, rv={rv!r}"
            ) from None
    else:
        c = compare(lv, rv)
    if op == ">":
        return c > 0
    if op == ">=":
        return c >= 0
    if op == "<":
        return c < 0
    return c <= 0


def negate(value: object) -> object:
    """Return unary minus of a value: NULL unless it is a number."""
    if value is None:
        return None
    cls = jtype(value)
    if cls is _I:
        # Java int and long negation wrap around at the minimum value.
        return value if value == INT_MIN else -value  # type: ignore[operator]
    if cls is _L:
        return value if value == LONG_MIN else -value  # type: ignore[operator]
    if cls is _D:
        return -value  # type: ignore[operator]
    return None
