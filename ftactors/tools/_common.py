"""What the subcommands share: the ``ftactors`` parser, JSON results.

Every subcommand module registers itself with an ``add_*(sub)`` function; ``cli``
assembles them all, and ``ftactors submit``'s job side assembles only ``chaos``. Nothing
here imports a subcommand, so any of them may import this.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
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
    """Parse ``argv`` and run the chosen subcommand's handler; its exit code. Output
    piped into a reader that stops early (``ftactors options | head``) ends the command
    quietly, as other Unix tools do."""
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return 141  # 128 + SIGPIPE, what a shell reports for a reader that stopped


def write_json(path: str | None, data: dict) -> None:
    """Write ``data`` to ``path`` (no path: nothing) and say so."""
    if path:
        with open(path, "w") as f:
            json.dump(data, f, indent=2, default=str)
        print(f"wrote {path}")
