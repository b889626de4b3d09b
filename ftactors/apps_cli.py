"""``ftactors run APP`` and ``ftactors demo``: the apps from the command line.

Every app module (``ftactors.apps.<name>``) exposes the same small contract, so this
file knows nothing about any app in particular:

* ``RANK_CLASS``: the ``ft.Rank`` subclass;
* ``add_arguments(parser)``: its own options;
* ``kwargs_from_args(args) -> dict``: ``main()``'s kwargs, raising ``ValueError`` with a
  clear message for bad options (then the command exits with code 2);
* ``summarize(result) -> (verified, lines, record)``: the verification verdict, the lines
  to print (ending with ``VERIFICATION SUCCESSFUL`` or ``VERIFICATION FAILED``) and a
  JSON-able record.
"""
from __future__ import annotations

import argparse
import importlib
import sys

APPS = ("cg", "hpl", "stencil", "coupled")


def _app(name: str):
    return importlib.import_module(f"ftactors.apps.{name}")


def protocol_stack(app_cls: type, protocol: str | None) -> type:
    """The app class with the named protocol mixin in front (None: the bare app)."""
    if protocol in (None, "none"):
        return app_cls
    from ftactors.protocols import PROTOCOLS
    mixin = PROTOCOLS[protocol]
    return type(f"{mixin.__name__}{app_cls.__name__}", (mixin, app_cls), {"__module__": __name__})


def _protocol_names() -> list[str]:
    from ftactors.protocols import PROTOCOLS
    return ["none", *PROTOCOLS]


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ranks", type=int, default=4, help="number of ranks (default 4)")
    p.add_argument("--transport", choices=("ray", "local", "sim"), default="ray")
    p.add_argument("--address", default=None, help="Ray cluster address (default: embedded local Ray)")
    p.add_argument("--protocol", default="none", choices=_protocol_names(),
                   help="fault-tolerance protocol mixed into the app")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, metavar="PATH", help="write the result record as JSON")
    p.add_argument("--trace", default=None, metavar="PATH", help="write a Parquet message trace")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS")


def add_run(sub) -> None:
    p = sub.add_parser("run", help="run an app (cg, hpl, stencil, coupled) and verify it")
    apps = p.add_subparsers(dest="app", required=True)
    for name in APPS:
        mod = _app(name)
        ap = apps.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0])
        _add_common(ap)
        mod.add_arguments(ap)
        ap.set_defaults(func=_cmd_run, app_module=mod)


def _cmd_run(args) -> int:
    import ftactors as ft
    from .cli import _progress_printer, write_json

    mod = args.app_module
    if args.ranks < 1:
        print(f"ftactors run {args.app}: --ranks must be >= 1, got {args.ranks}", file=sys.stderr)
        return 2
    try:
        kwargs = mod.kwargs_from_args(args)
    except ValueError as exc:
        print(f"ftactors run {args.app}: {exc}", file=sys.stderr)
        return 2
    cls = protocol_stack(mod.RANK_CLASS, args.protocol)
    print(f"{args.app}: {args.ranks} ranks on {args.transport}, protocol {args.protocol}, "
          f"{', '.join(f'{k}={v}' for k, v in kwargs.items())}", flush=True)
    try:
        result = ft.run(cls, ranks=args.ranks, kwargs=kwargs, transport=args.transport,
                        address=args.address, seed=args.seed, timeout_s=args.timeout,
                        trace=args.trace, progress=_progress_printer())
    except (ft.RankError, ft.RankFailed, TimeoutError) as exc:
        print(f"run failed: {exc}", file=sys.stderr)
        return 1
    verified, lines, record = mod.summarize(result)
    for line in lines:
        print(line)
    record.update(app=args.app, ranks=args.ranks, transport=args.transport,
                  protocol=args.protocol, verified=verified, metrics=result.metrics)
    write_json(args.json, record)
    return 0 if verified else 1


def add_demo(sub) -> None:
    p = sub.add_parser("demo", help="the local demo: CG on an embedded Ray")
    p.add_argument("--problem-class", default="S", choices=("S", "W", "A"))
    p.add_argument("--ranks", type=int, default=4)
    p.set_defaults(func=_cmd_demo)


def _cmd_demo(args) -> int:
    return _cmd_run(argparse.Namespace(
        app="cg", app_module=_app("cg"), ranks=args.ranks, transport="ray", address=None,
        protocol="none", seed=0, json=None, trace=None, timeout=None,
        problem_class=args.problem_class))
