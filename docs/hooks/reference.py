"""A MkDocs hook that makes reference pages from the code, so they cannot go stale.

* ``<!-- cli reference -->`` becomes the ``--help`` of every ``ftactors`` subcommand,
  made from the parser the command itself runs (``tools.cli.build_parser``). The flags
  made from the options of ``ft.run`` (``--NAME`` for each) are left out of each listing:
  the options table (made from the same declarations) lists them once.
* ``<!-- module docstrings: PACKAGE -->`` becomes a mkdocstrings entry (its docstring,
  no members) for every module of ``PACKAGE``, so architecture pages link to each
  module's theory of operation instead of repeating it, and a module added later is
  listed too.
* ``<!-- docstring: MODULE.NAME -->`` becomes the signature and docstring of an object as
  Python sees them once imported (``ft.run``'s docstring is made at import time from the
  options' declarations, and its signature is ``RunConfig.of``'s: mkdocstrings, reading
  the source, sees neither).
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import os
import pkgutil

MARKER = "<!-- cli reference -->"
MODULES = "<!-- module docstrings: "
DOCSTRING = "<!-- docstring: "


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(words after ``ftactors``, parser) of every leaf subcommand, in declared order."""
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not actions:
        yield path, parser
        return
    for name, sub in actions[0].choices.items():
        yield from _subcommands(sub, (*path, name))


def _option_flags() -> set[str]:
    from ftactors.protocols import PROTOCOLS
    from ftactors.runtime._options import CORE_OPTIONS
    return {o.flag for o in CORE_OPTIONS} | {o.flag for p in PROTOCOLS.values()
                                             for o in p.OPTIONS}


def cli_reference() -> str:
    """A section per subcommand: its ``--help`` without the flags of ``ft.run``'s options,
    and whether it takes them."""
    from ftactors.tools.cli import build_parser
    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width: fix it
    flags, parts = _option_flags(), []
    for words, parser in _subcommands(build_parser()):
        name = " ".join(words)
        hidden = [a for a in parser._actions if flags.intersection(a.option_strings)]
        for action in hidden:
            action.help = argparse.SUPPRESS
        text = parser.format_help().rstrip()
        if hidden:
            text += ("\n\nand every option of ft.run as --NAME (see the options table), "
                     f"{len(hidden)} here")
        parts.append(f"### `ftactors {name}`\n\n```text\n{text}\n```\n")
    return "\n".join(parts)


def module_entries(package: str) -> str:
    root = importlib.import_module(package)
    names = [package] + [m.name for m in pkgutil.walk_packages(root.__path__, package + ".")
                         if not m.name.endswith("__main__")]
    return "\n".join(f"::: {name}\n    options:\n      members: false\n" for name in names)


def docstring(dotted: str) -> str:
    """The object's signature and docstring as Python sees them once imported."""
    module, _, name = dotted.rpartition(".")
    obj = getattr(importlib.import_module(module), name)
    return f"```text\n{name}{inspect.signature(obj)}\n\n{inspect.getdoc(obj)}\n```\n"


def _expand(markdown: str, marker: str, make) -> str:
    while marker in markdown:
        start = markdown.index(marker)
        end = markdown.index("-->", start) + 3
        markdown = markdown[:start] + make(markdown[start + len(marker):end - 3].strip()) + (
            markdown[end:])
    return markdown


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, cli_reference())
    markdown = _expand(markdown, MODULES, module_entries)
    return _expand(markdown, DOCSTRING, docstring)
