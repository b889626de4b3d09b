"""``ftactors options [STACK]``: every option ``ft.run`` takes (the core's, and those of
the protocols in STACK, or of every protocol), as declared (``runtime/_options``): type,
unit, default, where it applies, meaning. ``ftactors run`` and ``ftactors chaos`` take
each as ``--NAME`` (``_`` written ``-``), an experiment's ``protocols:`` entry as a key.
"""
from __future__ import annotations

import sys

from ..runtime import OWN_ROUNDS, core_default, options_table, options_text, with_role
# public: an option's role, as its Option record declares it (bench nodes leaves a level's
# own-round options out of a stack whose consistency protocol hands its parts to the levels)
# public: a core option's declared default (the asyncio floor of bench solver polls as long
# as a rank does)
from .apps_cli import protocol_stack, stack_names


def add_options(sub) -> None:
    p = sub.add_parser("options", help="list the options of ft.run (of a protocol stack)",
                       description="The options of ft.run: the core's and each protocol's "
                                   "(flags of ftactors run/chaos: --NAME with - for _).")
    p.add_argument("stack", nargs="?", default=None, metavar="STACK",
                   help="a protocol or stack (rs+standby): only its protocols' options "
                        "beside the core's (default: every protocol's)")
    p.add_argument("--markdown", action="store_true",
                   help="print the options table of docs/reference/options.md instead (made "
                        "from the same declarations; tests/runtime/test_options.py keeps the "
                        "page equal)")
    p.set_defaults(func=_cmd_options)


def _cmd_options(args) -> int:
    import ftactors as ft
    from ftactors.protocols import PROTOCOLS
    if args.stack is None:
        shown = PROTOCOLS
    else:
        try:
            protocol_stack(ft.Rank, args.stack)
        except ValueError as exc:
            print(f"ftactors options: {exc}", file=sys.stderr)
            return 2
        shown = {n: PROTOCOLS[n] for n in stack_names(args.stack)}
    if args.markdown:
        sys.stdout.write(options_table(shown))
    else:
        print(options_text(shown))
    return 0
