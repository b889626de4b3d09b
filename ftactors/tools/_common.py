"""What the subcommands share: the ``ftactors`` parser, JSON results.

Every subcommand module registers itself with an ``add_*(sub)`` function; ``cli``
assembles them all, and ``ftactors submit``'s job side assembles only ``chaos``. Nothing
here imports a subcommand, so any of them may import this.
"""
from __future__ import annotations

import argparse
import json
from typing import Callable


def command_parser(*adders: Callable) -> argparse.ArgumentParser:
    """The ``ftactors`` parser with the subcommands that ``adders`` register."""
    parser = argparse.ArgumentParser(
        prog="ftactors",
        description="Fault-tolerant actors on Ray with an mpi4py-style facade.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    for add in adders:
        add(sub)
    return parser


def run_command(parser: argparse.ArgumentParser, argv: list[str] | None) -> int:
    """Parse ``argv`` and run the chosen subcommand's handler; its exit code."""
    args = parser.parse_args(argv)
    return args.func(args)


def write_json(path: str | None, data: dict) -> None:
    """Write ``data`` to ``path`` (no path: nothing) and say so."""
    if path:
        with open(path, "w") as f:
            json.dump(data, f, indent=2, default=str)
        print(f"wrote {path}")
