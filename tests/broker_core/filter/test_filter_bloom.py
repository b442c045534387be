"""RocketMQ's Bloom filter: sizing formulas, bit positions and the bit array."""

from __future__ import annotations

import math

import mmh3
import pytest

from broker_core.errors import ValidationError
from broker_core.filter.bloom import BitsArray, BloomFilter, BloomFilterData


@pytest.mark.parametrize(
    ("f", "n", "k", "m"),
    [
        (20, 32, 3, 112),  # the broker's defaults
        (10, 64, 4, 312),
        (1, 100, 7, 960),
        (50, 1, 1, 8),
        (99, 1, 1, 8),
    ],
)
def test_k_and_m_follow_the_formulas(f: int, n: int, k: int, m: int) -> None:
    bf = BloomFilter.create_by_fn(f, n)
    assert (bf.k, bf.m) == (k, m)
    assert bf.k == math.ceil(math.log(f / 100) / math.log(0.5))
    raw = math.ceil(n * math.log2(100 / f) * math.log2(math.e))
    assert bf.m == 8 * math.ceil(raw / 8) and bf.m % 8 == 0


@pytest.mark.parametrize(("f", "n"), [(0, 10), (100, 10), (-1, 1), (20, 0)])
def test_invalid_parameters_are_rejected(f: int, n: int) -> None:
    with pytest.raises(ValidationError):
        BloomFilter(f, n)


def test_murmur3_h1_matches_guava_vectors() -> None:
    # Guava's Murmur3Hash128Test: (seed, h1) for "hell" and "hello".
    assert mmh3.hash64(b"hell", 0, signed=False)[0] == 0x629942693E10F867
    assert mmh3.hash64(b"hello", 1, signed=False)[0] == 0xA78DDFF5ADAE8D10
    # asLong() is the first 8 bytes of the hash, little-endian.
    raw = mmh3.hash_bytes(b"hello world")
    assert (
        int.from_bytes(raw[:8], "little")
        == mmh3.hash64(b"hello world", 0, signed=False)[0]
    )


def expected_positions(text: str, k: int, m: int) -> list[int]:
    h = int.from_bytes(mmh3.hash_bytes(text.encode("utf-8"))[:8], "little", signed=True)

    def i32(v: int) -> int:
        v &= 0xFFFFFFFF
        return v - (1 << 32) if v >= 1 << 31 else v

    hash1, hash2 = i32(h), i32(h >> 32)
    out = []
    for i in range(1, k + 1):
        c = i32(hash1 + i * hash2)
        out.append((~c if c < 0 else c) % m)
    return out


@pytest.mark.parametrize("text", ["CID_A#TopicTest", "g#t", "", "中文#topic", "😀"])
def test_bit_positions_follow_the_description(text: str) -> None:
    bf = BloomFilter(20, 32)
    data = bf.generate(text)
    assert list(data.bit_pos) == expected_positions(text, 3, 112)
    assert data.bit_num == 112
    assert all(0 <= p < 112 for p in data.bit_pos)


def test_hash_to_then_is_hit_and_false_hit_check() -> None:
    bf = BloomFilter(20, 32)
    bits = bf.empty_bits()
    assert not bf.is_hit("g1#t", bits)
    bf.hash_to("g1#t", bits)
    assert bf.is_hit("g1#t", bits)
    assert bf.check_false_hit(bf.generate("g1#t"), bits)
    members = [f"group{i}#topic" for i in range(32)]
    for name in members:
        bf.hash_to(name, bits)
    assert all(bf.is_hit(name, bits) for name in members)


def test_is_valid_requires_matching_shape() -> None:
    bf = BloomFilter(20, 32)
    assert bf.is_valid(bf.generate("x"))
    assert not bf.is_valid(None)
    assert not bf.is_valid(BloomFilterData((1, 2, 3), 104))
    assert not bf.is_valid(BloomFilterData((1, 2), 112))
    with pytest.raises(ValidationError):
        bf.is_hit(BloomFilterData((1, 2), 112), bf.empty_bits())
    with pytest.raises(ValidationError):
        bf.hash_to("x", BitsArray(104))


def test_bits_array_layout() -> None:
    bits = BitsArray(20)
    assert len(bits.to_bytes()) == 3
    bits.set_bit(0)
    bits.set_bit(9)
    bits.set_bit(19)
    assert bits.to_bytes() == bytes([0b1, 0b10, 0b1000])
    assert bits.get_bit(9) and not bits.get_bit(8)
    bits.set_bit(9, False)
    assert not bits.get_bit(9)
    other = BitsArray(20)
    other.set_bit(5)
    bits.or_(other)
    assert bits.get_bit(5) and bits.get_bit(0)
    with pytest.raises(ValidationError):
        bits.get_bit(20)
    with pytest.raises(ValidationError):
        BitsArray(20, b"\x00")
