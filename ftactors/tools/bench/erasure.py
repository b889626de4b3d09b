"""Erasure codec throughput (encode, decode, partial products) per core against memcpy.

What is measured, single-threaded, in one invocation:

* *memcpy*: ``np.copyto`` of an array the size of one block, the baseline every rate is
  divided by (the machine is shared and noisy; the ratio is what carries over).
* *encode*: ``RSCode(k, m).encode`` of ``k`` blocks; the rate counts the ``k`` data blocks
  consumed, ``k * block / time``.
* *decode*: ``decode`` with the first ``min(k, m)`` data blocks erased (the worst case:
  as many blocks as possible rebuilt, from parity only); the rate counts the ``k`` data
  blocks returned.
* *partial product*: ``gf_mul_block`` of one block by each constant of a Cauchy column
  (one rank's share of a star encoding, done one constant at a time; the mean over the
  constants), in GB/s, and ``partial_products`` for the whole column (the doublings
  shared), counting ``m`` products. Target (issue): ``gf_mul_block`` >= 1 GB/s per core.

Each figure is the best of ``--repeat`` runs (the least disturbed by other load).
"""
from __future__ import annotations

import time

import numpy as np

from ftactors.protocols.erasure import RSCode, cauchy_matrix, gf_mul_block, partial_products

MIB = 1 << 20


def add_arguments(parser) -> None:
    parser.add_argument("--codes", default="4x4,8x8", help="k x m codes, e.g. 4x4,8x8")
    parser.add_argument("--sizes-mib", default="4,64", help="block sizes in MiB")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (best kept)")
    parser.add_argument("--quick", action="store_true",
                        help="blocks of 256 KiB and 1 MiB, 2 repeats")


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(k: int, m: int, size: int, repeat: int, rng) -> dict:
    """Rates in MB/s (10^6 bytes) for one code and block size."""
    code = RSCode(k, m)
    data = [rng.integers(0, 256, size, dtype=np.uint8) for _ in range(k)]
    dst = np.empty(size, dtype=np.uint8)
    t_copy = _best(lambda: np.copyto(dst, data[0]), repeat)
    parity = code.encode(data)
    t_enc = _best(lambda: code.encode(data), repeat)
    erased = set(range(min(k, m)))
    avail = {i: b for i, b in enumerate(data + parity) if i not in erased}
    decoded = code.decode(avail, size)
    assert all(np.array_equal(a, b) for a, b in zip(decoded, data)), "decode mismatch"
    t_dec = _best(lambda: code.decode(avail, size), repeat)
    column = [int(c) for c in cauchy_matrix(k, m)[:, 0]]
    t_mul = sum(_best(lambda c=c: gf_mul_block(data[0], c), repeat) for c in column)
    t_pp = _best(lambda: partial_products(data[0], column), repeat)
    memcpy = size / t_copy / 1e6
    r = {"k": k, "m": m, "block_bytes": size, "memcpy_MBps": memcpy,
         "encode_MBps": k * size / t_enc / 1e6, "decode_MBps": k * size / t_dec / 1e6,
         "erased": sorted(erased),
         "gf_mul_block_GBps": len(column) * size / t_mul / 1e9,
         "partial_products_GBps": len(column) * size / t_pp / 1e9}
    r["encode_over_memcpy"] = r["encode_MBps"] / memcpy
    r["decode_over_memcpy"] = r["decode_MBps"] / memcpy
    r["gf_mul_block_over_memcpy"] = r["gf_mul_block_GBps"] * 1e3 / memcpy
    return r


def main(args) -> int:
    from ftactors.tools.cli import write_json
    codes = [tuple(int(v) for v in c.split("x")) for c in args.codes.split(",")]
    sizes = [int(float(s) * MIB) for s in args.sizes_mib.split(",")]
    if args.quick:
        sizes, args.repeat = [MIB // 4, MIB], 2
    rng = np.random.default_rng(0)
    print(f"bench erasure: codes {args.codes}, blocks {[s / MIB for s in sizes]} MiB, "
          f"best of {args.repeat}, one core", flush=True)
    print(f"\n  {'k+m':>5s} {'block':>9s} {'memcpy':>9s} {'encode':>9s} {'/cpy':>6s} "
          f"{'decode':>9s} {'/cpy':>6s} {'mul_block':>10s} {'part.prod':>10s}")
    print(f"  {'':5s} {'MiB':>9s} {'MB/s':>9s} {'MB/s':>9s} {'':6s} {'MB/s':>9s} {'':6s} "
          f"{'GB/s':>10s} {'GB/s':>10s}")
    results = []
    for size in sizes:
        for k, m in codes:
            r = measure(k, m, size, args.repeat, rng)
            results.append(r)
            print(f"  {f'{k}+{m}':>5s} {size / MIB:9.2f} {r['memcpy_MBps']:9.0f} "
                  f"{r['encode_MBps']:9.0f} {r['encode_over_memcpy']:6.3f} "
                  f"{r['decode_MBps']:9.0f} {r['decode_over_memcpy']:6.3f} "
                  f"{r['gf_mul_block_GBps']:10.3f} {r['partial_products_GBps']:10.3f}",
                  flush=True)
    worst = min(r["gf_mul_block_GBps"] for r in results)
    target = worst >= 1.0
    print(f"\n  target gf_mul_block >= 1 GB/s per core: {'met' if target else 'NOT met'} "
          f"(slowest {worst:.3f} GB/s)")
    write_json(args.json, {"benchmark": "erasure", "quick": bool(args.quick),
                           "repeat": args.repeat, "results": results,
                           "targets": {"gf_mul_block_ge_1GBps": target}})
    return 0
