"""The ``ftactors`` command: run apps, the demo, benchmarks, trace and group tools.

Each subcommand module registers itself (its ``add_*``) in ``build_parser``; each handler
returns the process exit code (0 success, 1 a failed run or verification, 2 bad usage).
"""
from __future__ import annotations

import argparse
import json
import sys

from ..protocols.shared.units import (default_group_size, pairs_from_trace, ranks_in_trace,
                                suggest_groups, traffic_inside)
from ..runtime import plot_trace, read_traffic
from ._common import command_parser, run_command
from .advise import add_advise
from .apps_cli import add_demo, add_run
from .bench import add_bench
from .chaos import add_chaos
from .options import add_options
from .report import add_report
from .simcheck import add_sim_check
from .submit import add_submit


# ----------------------------------------------------------------------------- trace
def _cmd_trace_plot(args) -> int:
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


# ---------------------------------------------------------------------------- groups
def _cmd_groups_suggest(args) -> int:
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    try:
        table = read_traffic(args.trace)
        pairs = pairs_from_trace(table, kinds=kinds)
        seen = ranks_in_trace(table)
        nranks = seen if args.ranks is None else args.ranks
        if nranks < seen:
            raise ValueError(f"--ranks {nranks} is fewer than the trace shows ({seen})")
        max_size = default_group_size(nranks) if args.max_size is None else args.max_size
        groups = suggest_groups(pairs, max_size, nranks)
    except ValueError as exc:  # ConfigError is a ValueError too
        print(f"ftactors groups suggest: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    inside, total = traffic_inside(pairs, groups)
    messages = sum(p.count for p in pairs)
    counted = "/".join(kinds) if "kind" in table.column_names else "no kind column: all"
    print(f"{len(groups)} groups of at most {max_size} ranks for {nranks} ranks, from "
          f"{messages:,} messages ({counted}) in {args.trace}:")
    width = len(str(len(groups) - 1))
    for i, group in enumerate(groups):
        print(f"  group {i:>{width}}: {', '.join(map(str, group))}")
    share = 100.0 * inside / total if total else 0.0
    print(f"{share:.1f}% of {total:,} bytes stay inside groups; the rest crosses groups "
          f"(a group-based protocol logs it)")
    if args.out:
        data = {"groups": groups, "max_size": max_size, "source": args.trace,
                "nranks": nranks,
                "kinds": list(kinds) if "kind" in table.column_names else None,
                "traffic": {"messages": messages, "bytes": total, "bytes_inside_groups": inside}}
        # one line per group, so the file reads like the paper's Table 1 and edits easily
        rows = ",\n".join(f"    {json.dumps(g)}" for g in data.pop("groups"))
        rest = json.dumps(data, indent=2)[1:]  # '\n  "max_size": ...}'
        try:
            with open(args.out, "w") as f:
                f.write(f'{{\n  "groups": [\n{rows}\n  ],{rest}\n')
        except OSError as exc:
            print(f"ftactors groups suggest: cannot write {args.out!r}: {exc.strerror or exc}",
                  file=sys.stderr)
            return 2
        print(f"wrote {args.out}")
    return 0


def _add_groups(sub) -> None:
    p = sub.add_parser("groups", help="process groups for group-based checkpointing")
    gsub = p.add_subparsers(dest="groups_cmd", required=True)
    sug = gsub.add_parser(
        "suggest", help="suggest groups from a message trace (Algorithm 2 of Ho, Wang & Lau)",
        description="Merge rank pairs by total bytes, then message count, into groups of at "
                    "most G ranks (ranks in no group stay alone) and print them; --out "
                    "writes a JSON group definition.")
    sug.add_argument("trace", help="a Parquet trace written by ft.run(..., trace=PATH), or any "
                                   "Parquet or CSV (*.csv) file with source, dest and bytes "
                                   "columns (kind is used when present)")
    sug.add_argument("--max-size", "-G", type=int, default=None, metavar="G",
                     help="largest group (default ceil(sqrt(ranks)), as in the paper)")
    sug.add_argument("--ranks", type=int, default=None, metavar="N",
                     help="ranks of the run (default: highest rank in the trace + 1)")
    sug.add_argument("--kinds", default="app,coll",
                     help="message kinds that count, comma-separated (default app,coll: "
                          "protocol control messages are not the program's traffic)")
    sug.add_argument("--out", "-o", default=None, metavar="PATH",
                     help="write the groups as JSON {\"groups\": [[...], ...], ...}")
    sug.set_defaults(func=_cmd_groups_suggest)


# ---------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    return command_parser(add_run, add_demo, add_bench, _add_trace, _add_groups, add_advise,
                          add_sim_check, add_chaos, add_submit, add_report, add_options)


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
