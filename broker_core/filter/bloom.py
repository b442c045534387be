"""RocketMQ's Bloom filter and bit array (``filter/util/BloomFilter.java``, §4.5).

A filter of error rate ``f`` percent for ``n`` members uses
``k = ceil(ln(f/100) / ln(0.5))`` hash functions and ``m`` bits,
``ceil(n * log2(100/f) * log2(e))`` rounded up to a multiple of 8. A string's
bit positions come from Guava's ``murmur3_128`` (seed 0) ``asLong()``: the
first 8 bytes of the hash read little-endian (``h1``); with ``hash1`` its low
and ``hash2`` its high 32 bits, position ``i`` (1..k) is ``hash1 + i*hash2`` in
int32 arithmetic, bit-inverted when negative, modulo ``m``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mmh3

from broker_core.errors import ValidationError


@dataclass(frozen=True, slots=True)
class BloomFilterData:
    """The bit positions of one member and the filter width they belong to."""

    bit_pos: tuple[int, ...]
    bit_num: int


class BitsArray:
    """A fixed number of bits; bit ``i`` is ``1 << (i % 8)`` of byte ``i // 8``."""

    __slots__ = ("bit_length", "data")

    def __init__(self, bit_length: int, data: bytes | bytearray | None = None) -> None:
        if bit_length < 1:
            raise ValidationError(f"bit length must be positive, not {bit_length}")
        size = (bit_length + 7) // 8
        if data is not None and len(data) != size:
            raise ValidationError(
                f"{bit_length} bits need {size} bytes, got {len(data)}"
            )
        self.bit_length = bit_length
        self.data = bytearray(data) if data is not None else bytearray(size)

    def _check(self, index: int) -> None:
        if not 0 <= index < self.bit_length:
            raise ValidationError(f"bit {index} is outside 0..{self.bit_length - 1}")

    def set_bit(self, index: int, value: bool = True) -> None:
        """Set (or clear) bit ``index``."""
        self._check(index)
        if value:
            self.data[index >> 3] |= 1 << (index & 7)
        else:
            self.data[index >> 3] &= ~(1 << (index & 7)) & 0xFF

    def get_bit(self, index: int) -> bool:
        """Return bit ``index``."""
        self._check(index)
        return bool(self.data[index >> 3] & (1 << (index & 7)))

    def or_(self, other: BitsArray) -> None:
        """Set every bit that is set in ``other`` (same length)."""
        if other.bit_length != self.bit_length:
            raise ValidationError("bit arrays differ in length")
        self.data[:] = (
            int.from_bytes(self.data, "little") | int.from_bytes(other.data, "little")
        ).to_bytes(len(self.data), "little")

    def to_bytes(self) -> bytes:
        return bytes(self.data)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, BitsArray)
            and other.bit_length == self.bit_length
            and other.data == self.data
        )

    def __hash__(self) -> int:
        return hash((self.bit_length, bytes(self.data)))

    def __repr__(self) -> str:
        bits = "".join("1" if self.get_bit(i) else "0" for i in range(self.bit_length))
        return f"BitsArray({bits})"


class BloomFilter:
    """A Bloom filter with RocketMQ's sizing and hashing; see the module docstring."""

    __slots__ = ("f", "n", "k", "m")

    def __init__(self, f: int, n: int) -> None:
        if not 1 <= f < 100:
            raise ValidationError(f"error rate must be in [1, 100) percent, not {f}")
        if n < 1:
            raise ValidationError(f"expected member count must be positive, not {n}")
        error_rate = f / 100.0
        k = math.ceil(math.log(error_rate) / math.log(0.5))
        if k < 1:
            raise ValidationError(f"error rate {f}% needs no hash function")
        m = math.ceil(
            n
            * (math.log(1 / error_rate) / math.log(2))
            * (math.log(math.e) / math.log(2))
        )
        self.f, self.n, self.k = f, n, k
        self.m = 8 * math.ceil(m / 8)

    @classmethod
    def create_by_fn(cls, f: int, n: int) -> BloomFilter:
        """Return a filter of error rate ``f`` percent for ``n`` members."""
        return cls(f, n)

    def positions(self, text: str) -> tuple[int, ...]:
        """Return the ``k`` bit positions of ``text``."""
        h1 = mmh3.hash64(text.encode("utf-8"), 0, signed=False)[0]
        hash1 = _int32(h1 & 0xFFFFFFFF)
        hash2 = _int32(h1 >> 32)
        out = []
        for i in range(1, self.k + 1):
            c = _int32(hash1 + i * hash2)
            if c < 0:
                c = ~c
            out.append(c % self.m)
        return tuple(out)

    def generate(self, text: str) -> BloomFilterData:
        """Return the positions of ``text`` with this filter's width."""
        return BloomFilterData(self.positions(text), self.m)

    def empty_bits(self) -> BitsArray:
        """Return an all-zero bit array of this filter's width."""
        return BitsArray(self.m)

    def is_valid(self, data: BloomFilterData | None) -> bool:
        """Return whether ``data`` was generated by a filter of this shape."""
        return (
            data is not None and data.bit_num == self.m and len(data.bit_pos) == self.k
        )

    def _require(self, data: BloomFilterData, bits: BitsArray) -> None:
        if not self.is_valid(data):
            raise ValidationError("bloom filter data does not fit this filter")
        if bits.bit_length != self.m:
            raise ValidationError(f"bit array has {bits.bit_length} bits, not {self.m}")

    def hash_to(self, data: BloomFilterData | str, bits: BitsArray) -> None:
        """Set the bits of ``data`` (or of a string) in ``bits``."""
        if isinstance(data, str):
            data = self.generate(data)
        self._require(data, bits)
        for pos in data.bit_pos:
            bits.set_bit(pos)

    def is_hit(self, data: BloomFilterData | str, bits: BitsArray) -> bool:
        """Return whether every bit of ``data`` is set (maybe a member)."""
        if isinstance(data, str):
            data = self.generate(data)
        self._require(data, bits)
        return all(bits.get_bit(pos) for pos in data.bit_pos)

    def check_false_hit(self, data: BloomFilterData | str, bits: BitsArray) -> bool:
        """Return whether adding ``data`` would set no new bit (a false hit)."""
        return self.is_hit(data, bits)

    def __repr__(self) -> str:
        return f"BloomFilter(f={self.f}, n={self.n}, k={self.k}, m={self.m})"


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 0x100000000 if value & 0x80000000 else value
