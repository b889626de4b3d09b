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

import numpy as np

from ftactors.protocols.rs.erasure import RSCode, cauchy_matrix, gf_mul_block, partial_products

from ._harness import add_repetitions, best_of, table, write_results

MIB = 1 << 20


def add_arguments(parser) -> None:
    parser.add_argument("--codes", default="4x4,8x8", help="k x m codes, e.g. 4x4,8x8")
    parser.add_argument("--sizes-mib", default="4,64", help="block sizes in MiB")
    add_repetitions(parser, 3, "runs per figure (best kept)", flag="--repeat")
    parser.add_argument("--quick", action="store_true",
                        help="blocks of 256 KiB and 1 MiB, 2 repeats")


def measure(k: int, m: int, size: int, repeat: int, rng) -> dict:
    """Rates in MB/s (10^6 bytes) for one code and block size."""
    code = RSCode(k, m)
    data = [rng.integers(0, 256, size, dtype=np.uint8) for _ in range(k)]
    dst = np.empty(size, dtype=np.uint8)
    t_copy = best_of(lambda: np.copyto(dst, data[0]), repeat)
    parity = code.encode(data)
    t_enc = best_of(lambda: code.encode(data), repeat)
    erased = set(range(min(k, m)))
    avail = {i: b for i, b in enumerate(data + parity) if i not in erased}
    decoded = code.decode(avail, size)
    assert all(np.array_equal(a, b) for a, b in zip(decoded, data)), "decode mismatch"
    t_dec = best_of(lambda: code.decode(avail, size), repeat)
    column = [int(c) for c in cauchy_matrix(k, m)[:, 0]]
    t_mul = sum(best_of(lambda c=c: gf_mul_block(data[0], c), repeat) for c in column)
    t_pp = best_of(lambda: partial_products(data[0], column), repeat)
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
    codes = [tuple(int(v) for v in c.split("x")) for c in args.codes.split(",")]
    sizes = [int(float(s) * MIB) for s in args.sizes_mib.split(",")]
    if args.quick:
        sizes, args.repetitions = [MIB // 4, MIB], 2
    rng = np.random.default_rng(0)
    print(f"bench erasure: codes {args.codes}, blocks {[s / MIB for s in sizes]} MiB, "
          f"best of {args.repetitions}, one core", flush=True)
    results = [measure(k, m, size, args.repetitions, rng) for size in sizes for k, m in codes]
    print()
    print(table([("k+m", "block", "memcpy", "encode", "/cpy", "decode", "/cpy", "mul_block",
                  "part.prod"),
                 ("", "MiB", "MB/s", "MB/s", "", "MB/s", "", "GB/s", "GB/s")]
                + [(f"{r['k']}+{r['m']}", f"{r['block_bytes'] / MIB:.2f}", f"{r['memcpy_MBps']:.0f}",
                    f"{r['encode_MBps']:.0f}", f"{r['encode_over_memcpy']:.3f}",
                    f"{r['decode_MBps']:.0f}", f"{r['decode_over_memcpy']:.3f}",
                    f"{r['gf_mul_block_GBps']:.3f}", f"{r['partial_products_GBps']:.3f}")
                   for r in results], left=0, header=2))
    worst = min(r["gf_mul_block_GBps"] for r in results)
    target = worst >= 1.0
    print(f"\n  target gf_mul_block >= 1 GB/s per core: {'met' if target else 'NOT met'} "
          f"(slowest {worst:.3f} GB/s)")
    write_results(args, "erasure", {"quick": bool(args.quick), "repeat": args.repetitions,
                                    "results": results,
                                    "targets": {"gf_mul_block_ge_1GBps": target}})
    return 0
