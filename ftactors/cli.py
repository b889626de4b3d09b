"""The ``ftactors`` command: run apps, the demo, benchmarks and trace tools.

Subcommands register themselves in ``build_parser``; each handler returns the process
exit code (0 success, 1 a failed run or verification, 2 bad usage).
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def _progress_printer(out=sys.stderr):
    """A ``progress=`` callback that prints the slowest and fastest rank's iteration."""
    t0 = time.time()

    def show(positions):
        known = [p for p in positions if p is not None]
        if not known:
            return
        lo, hi = min(known), max(known)
        print(f"  [{time.time() - t0:6.1f}s] iteration {lo[1]}"
              + (f"..{hi[1]}" if hi != lo else "") + f" (loop {lo[0]})", file=out, flush=True)

    return show


def write_json(path: str | None, data: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(data, f, indent=2, default=str)
        print(f"wrote {path}")


# ----------------------------------------------------------------------------- trace
def _cmd_trace_plot(args) -> int:
    from ._trace import plot_trace
    try:
        plot_trace(args.trace, args.output, title=args.title)
    except ValueError as exc:
        print(f"ftactors trace plot: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}")
    return 0


def _add_trace(sub) -> None:
    p = sub.add_parser("trace", help="work with message traces (Parquet)")
    tsub = p.add_subparsers(dest="trace_cmd", required=True)
    plot = tsub.add_parser("plot", help="draw the ranks-by-time message diagram of a trace")
    plot.add_argument("trace", help="a Parquet trace written by ft.run(..., trace=PATH)")
    plot.add_argument("-o", "--output", default="trace.png", help="PNG to write (default trace.png)")
    plot.add_argument("--title", default=None)
    plot.set_defaults(func=_cmd_trace_plot)


# ---------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ftactors",
        description="Fault-tolerant actors on Ray with an mpi4py-style facade.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    from .apps_cli import add_demo, add_run
    add_run(sub)
    add_demo(sub)
    from .bench import add_bench
    add_bench(sub)
    _add_trace(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
