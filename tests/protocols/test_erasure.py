"""The GF(2^8) Reed-Solomon codec of RSBackup: field axioms, the Cauchy matrix, exact
decoding under every (or many) erasure patterns, linearity and star encoding."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from ftactors.protocols.rs.erasure import (MUL_TABLE, RSCode, cauchy_matrix, gf_inv, gf_inv_matrix,
                                        gf_mul, gf_mul_block, partial_products, xor_into)


def slow_mul(a: int, b: int) -> int:
    """Bitwise carry-less multiply reduced by 0x11D: the textbook reference."""
    r = 0
    while b:
        if b & 1:
            r ^= a
        b >>= 1
        a <<= 1
        if a & 0x100:
            a ^= 0x11D
    return r


def slow_inv(a: int) -> int:
    return next(x for x in range(1, 256) if slow_mul(a, x) == 1)


def rand_blocks(rng, k, length):
    return [rng.integers(0, 256, length, dtype=np.uint8) for _ in range(k)]


def assert_blocks_equal(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == np.uint8
        np.testing.assert_array_equal(g, np.frombuffer(bytes(w), dtype=np.uint8))


# ----------------------------------------------------------------------------- field
def test_mul_table_matches_bitwise_reference():
    ref = np.array([[slow_mul(a, b) for b in range(256)] for a in range(256)], np.uint8)
    np.testing.assert_array_equal(MUL_TABLE, ref)


def test_field_axioms_on_samples():
    rng = np.random.default_rng(0)
    for a, b, c in rng.integers(0, 256, (2000, 3)):
        a, b, c = int(a), int(b), int(c)
        assert gf_mul(a, b) == gf_mul(b, a)
        assert gf_mul(a, gf_mul(b, c)) == gf_mul(gf_mul(a, b), c)
        assert gf_mul(a, b ^ c) == gf_mul(a, b) ^ gf_mul(a, c)
        assert gf_mul(a, 1) == a and gf_mul(a, 0) == 0


def test_inverses():
    for a in range(1, 256):
        assert gf_mul(a, gf_inv(a)) == 1
    assert [gf_inv(a) for a in (1, 2, 3, 4)] == [1, 0x8E, 0xF4, 0x47]
    assert gf_inv(5) == slow_inv(5)
    with pytest.raises(ZeroDivisionError):
        gf_inv(0)


# ----------------------------------------------------------------------------- matrices
@pytest.mark.parametrize("k,m", [(1, 0), (1, 1), (4, 2), (8, 8), (10, 4), (128, 128)])
def test_cauchy_matches_reference(k, m):
    ref = [[slow_inv((k + i) ^ j) for j in range(k)] for i in range(m)]
    np.testing.assert_array_equal(cauchy_matrix(k, m), np.array(ref, np.uint8).reshape(m, k))


def test_cauchy_known_isal_values():
    # k=4, m=2: row i is 1/((4+i) xor j); 1/4 = 0x47 since 2 * 0x8E = 1 and 0x8E is even
    np.testing.assert_array_equal(cauchy_matrix(4, 2),
                                  [[0x47, 0xA7, 0x7A, 0xBA], [0xA7, 0x47, 0xBA, 0x7A]])
    code = RSCode(4, 2)
    np.testing.assert_array_equal(code.matrix[:4], np.eye(4, dtype=np.uint8))


def test_inv_matrix():
    rng = np.random.default_rng(1)
    code = RSCode(6, 6)
    for _ in range(50):
        rows = sorted(rng.choice(12, 6, replace=False))
        a = code.matrix[rows]
        inv = gf_inv_matrix(a)
        prod = np.zeros((6, 6), np.uint8)
        for i in range(6):
            for j in range(6):
                for t in range(6):
                    prod[i, j] ^= MUL_TABLE[a[i, t], inv[t, j]]
        np.testing.assert_array_equal(prod, np.eye(6, dtype=np.uint8))
    with pytest.raises(ValueError, match="singular"):
        gf_inv_matrix([[1, 2], [1, 2]])
    with pytest.raises(ValueError, match="square"):
        gf_inv_matrix([[1, 2, 3], [1, 2, 4]])


# ----------------------------------------------------------------------------- blocks
@pytest.mark.parametrize("length", [1, 7, 8, 9, 1000, 200_003])
def test_gf_mul_block_matches_table(length):
    rng = np.random.default_rng(length)
    block = rng.integers(0, 256, length, dtype=np.uint8)
    for c in (0, 1, 2, 0x1D, 0x80, 0xFF, int(rng.integers(256))):
        got = gf_mul_block(block, c)
        assert got.shape == (length,) and got.dtype == np.uint8
        np.testing.assert_array_equal(got, MUL_TABLE[c][block])
    np.testing.assert_array_equal(gf_mul_block(bytes(block), 3), MUL_TABLE[3][block])


def test_xor_into():
    acc = np.array([1, 2, 3], np.uint8)
    assert xor_into(acc, b"\x01\x00\xff") is acc
    np.testing.assert_array_equal(acc, [0, 2, 0xFC])
    with pytest.raises(ValueError):
        xor_into(acc, b"\x00")
    with pytest.raises(TypeError):
        xor_into([1, 2, 3], b"\x00\x00\x00")


def _patterns(n, m, rng, samples=40):
    """Every erasure pattern of size <= m if the code is small, else random ones."""
    if n <= 8:
        return [e for s in range(m + 1) for e in itertools.combinations(range(n), s)]
    pats = [(), tuple(range(min(m, n)))]  # no loss, and the first m (all data if m <= k)
    for _ in range(samples):
        s = int(rng.integers(0, m + 1))
        pats.append(tuple(int(v) for v in rng.choice(n, s, replace=False)))
    return pats


def test_decode_every_pattern_small_codes():
    rng = np.random.default_rng(2)
    for k in range(1, 8):
        for m in range(0, 9 - k):
            code = RSCode(k, m)
            for length in (1, 5, 16, 37):
                data = rand_blocks(rng, k, length)
                blocks = data + code.encode(data)
                for erased in _patterns(k + m, m, rng):
                    avail = {i: b for i, b in enumerate(blocks) if i not in erased}
                    assert_blocks_equal(code.decode(avail, length), data)


def test_decode_random_codes_and_patterns():
    rng = np.random.default_rng(3)
    for _ in range(25):
        k = int(rng.integers(1, 17))
        m = int(rng.integers(0, k + 1))
        length = int(rng.choice([1, 3, 8, 63, 64, 4097, int(rng.integers(1, 20000))]))
        code = RSCode(k, m)
        data = rand_blocks(rng, k, length)
        parity = code.encode(data)
        assert len(parity) == m and all(p.shape == (length,) for p in parity)
        blocks = data + parity
        for erased in _patterns(k + m, m, rng, samples=10):
            avail = {i: blocks[i] for i in rng.permutation(k + m) if i not in erased}
            assert_blocks_equal(code.decode(avail, length), data)


def test_every_pattern_for_random_codes_up_to_k_16():
    """Random codes with k <= 16, m <= k and random lengths: decode under *every* erasure
    pattern of size <= m (codes drawn until the patterns number at most 600, so the
    whole enumeration stays small), and every pattern of size m + 1 raises."""
    from math import comb
    rng = np.random.default_rng(9)
    drawn = []
    while len(drawn) < 6:
        k = int(rng.integers(1, 17))
        m = int(rng.integers(0, k + 1))
        if sum(comb(k + m, s) for s in range(m + 1)) <= 600:
            drawn.append((k, m))
    assert max(k for k, _ in drawn) >= 9  # not only tiny codes
    for k, m in drawn:
        code, length = RSCode(k, m), int(rng.integers(1, 300))
        data = rand_blocks(rng, k, length)
        blocks = data + code.encode(data)
        for s in range(m + 2):
            for erased in itertools.combinations(range(k + m), s):
                avail = {i: b for i, b in enumerate(blocks) if i not in erased}
                if s <= m:
                    assert_blocks_equal(code.decode(avail, length), data)
                else:  # k - 1 blocks left
                    with pytest.raises(ValueError, match="1 missing"):
                        code.decode(avail, length)


def test_decode_across_chunks_and_byte_inputs():
    rng = np.random.default_rng(4)
    code = RSCode(4, 4)
    length = 3 * 64 * 1024 + 5
    data = [bytes(b) for b in rand_blocks(rng, 4, length)]
    blocks = data + code.encode(data)
    got = code.decode({i: blocks[i] for i in (1, 4, 6, 7)}, length)
    assert_blocks_equal(got, data)


def test_too_many_erasures():
    rng = np.random.default_rng(5)
    code = RSCode(5, 3)
    data = rand_blocks(rng, 5, 10)
    blocks = data + code.encode(data)
    with pytest.raises(ValueError, match="2 missing"):
        code.decode({i: blocks[i] for i in (0, 2, 5)}, 10)
    with pytest.raises(ValueError, match="1 missing"):
        code.decode({i: blocks[i] for i in range(4)}, 10)


def test_encode_is_linear():
    rng = np.random.default_rng(6)
    for k, m, length in [(4, 4, 1001), (8, 8, 64), (16, 5, 9), (3, 1, 1)]:
        code = RSCode(k, m)
        a, b = rand_blocks(rng, k, length), rand_blocks(rng, k, length)
        pa, pb = code.encode(a), code.encode(b)
        pab = code.encode([x ^ y for x, y in zip(a, b)])
        for x, y, z in zip(pa, pb, pab):
            np.testing.assert_array_equal(x ^ y, z)


def test_star_encoding_matches_encode():
    rng = np.random.default_rng(7)
    for k, m, length in [(4, 4, 4099), (8, 8, 1), (6, 2, 77)]:
        code = RSCode(k, m)
        data = rand_blocks(rng, k, length)
        acc = [np.zeros(length, np.uint8) for _ in range(m)]
        cm = cauchy_matrix(k, m)
        for j, block in enumerate(data):
            for i, prod in enumerate(partial_products(block, cm[:, j])):
                np.testing.assert_array_equal(prod, gf_mul_block(block, int(cm[i, j])))
                xor_into(acc[i], prod)
        assert_blocks_equal(acc, code.encode(data))


# ----------------------------------------------------------------------------- errors
def test_bad_parameters_and_inputs():
    for k, m in [(0, 1), (1, -1), (200, 57)]:
        with pytest.raises(ValueError, match="k"):
            RSCode(k, m)
    with pytest.raises(TypeError):
        RSCode(2.0, 1)
    RSCode(255, 1)
    code = RSCode(3, 2)
    with pytest.raises(ValueError, match="equal lengths"):
        code.encode([b"ab", b"ab", b"abc"])
    with pytest.raises(ValueError, match="k=3"):
        code.encode([b"ab", b"ab"])
    with pytest.raises(TypeError):
        code.encode([b"ab", "ab", b"ab"])
    with pytest.raises(TypeError):
        code.encode([np.zeros(2, np.int32)] * 3)
    with pytest.raises(TypeError):
        code.encode(b"abc")
    data = [b"ab", b"cd", b"ef"]
    blocks = data + code.encode(data)
    with pytest.raises(ValueError, match="not in"):
        code.decode({0: blocks[0], 1: blocks[1], 7: blocks[2]}, 2)
    with pytest.raises(ValueError, match="expected 3"):
        code.decode(dict(enumerate(blocks)), 3)
    with pytest.raises(TypeError):
        code.decode(list(blocks), 2)
    with pytest.raises(ValueError):
        gf_mul_block(b"ab", 256)


@pytest.mark.parametrize("length", [1, 2, 9, 2 * 128 * 1024 + 3])
def test_both_kernels_match_table(length):
    """Few constants go through pair tables, many through shared doublings; both exact,
    including the top bit (0x80, 0xFF), zero and one, odd tails and several chunks."""
    rng = np.random.default_rng(8)
    block = rng.integers(0, 256, length, dtype=np.uint8)
    for column in ([0x80, 0xFF], [0, 1, 2, 0x80, 0xFF, 0x1D], list(range(256))):
        got = partial_products(block, column)
        for c, g in zip(column, got):
            np.testing.assert_array_equal(g, MUL_TABLE[c][block])


def test_empty_blocks():
    code = RSCode(3, 2)
    parity = code.encode([b"", b"", b""])
    assert [p.size for p in parity] == [0, 0]
    assert [b.size for b in code.decode({0: b"", 3: parity[0], 4: parity[1]}, 0)] == [0] * 3


def test_strided_and_2d_uint8_blocks():
    rng = np.random.default_rng(9)
    base = rng.integers(0, 256, (4, 202), dtype=np.uint8)
    data = [base[j, ::2] for j in range(3)] + [base[3, 1::2]]
    code = RSCode(4, 2)
    parity = code.encode(data)
    np.testing.assert_array_equal(gf_mul_block(base[0, ::2], 7), MUL_TABLE[7][base[0, ::2]])
    got = code.decode({1: data[1], 2: data[2], 4: parity[0], 5: parity[1]}, 101)
    assert_blocks_equal(got, [bytes(d) for d in data])
    np.testing.assert_array_equal(gf_mul_block(base[:2, :4], 3), MUL_TABLE[3][base[:2, :4]].ravel())
