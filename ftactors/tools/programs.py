"""Programs by reference: what a user names as an app, made into the class to run, its
arguments and how its answer is checked. Every tool that takes an app (``ftactors run``,
``chaos`` flags and experiment files, ``sim-check``, ``bench footprint``) resolves it
here, so a name means the same thing everywhere.

An app is one of the shipped apps (``cg``, ``hpl``, ``stencil``, ``coupled``: their
modules follow the contract of ``apps_cli``), or a program of the user's:
``package.module:Class`` (imported as Python would from the current directory) or
``path/to/file.py:Class`` (loaded from that file, registered in ``sys.modules`` under
its stem so the Ray transport can ship it by value; its folder goes on ``sys.path``, as
for a script, so it may import its neighbours). The class must be an ``ft.Rank``
subclass with ``async def main``; ``args`` and ``kwargs`` go to every rank's ``main()``.

How a program's answer is judged (``Program.judge``), the same in every tool:

* a shipped app: its own verification (``summarize``) and ``same_answer`` against the
  failure-free run's record (timings left out, equal within 1e-9 relative);
* a program with a check, ``verify(results, reference)`` defined on its class (a
  staticmethod or classmethod) or given as ``--check module:function``: ``results`` is
  the list of every rank's return value, ``reference`` the failure-free run's; the check
  returns true when the answer is right (an ``AssertionError`` it raises is a wrong
  answer, its message the reason);
* any other program: its results must equal the failure-free run's bit for bit
  (``same_bits``; arrays by dtype, shape and bytes, floats by their bits).

The failure-free run is that of the same program, arguments, ranks and transport with no
protocol and no failure; a tool computes it once per configuration (``Program.key``).
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import shlex
import struct
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

import numpy as np

APPS = ("cg", "hpl", "stencil", "coupled")
"""The shipped apps, by name."""

#: the keys of a shipped app's summary record that are timings, not the answer
TIMING_KEYS = ("time_s", "mops", "gflops")

FORMS = "package.module:Class or path/to/file.py:Class"


def app_module(name: str):
    """The module of shipped app ``name`` (one of APPS): its rank class, parser and checks."""
    return importlib.import_module(f"ftactors.apps.{name}")


def is_reference(text: str) -> bool:
    """True when ``text`` names a program (``X:Class``), not a shipped app."""
    return ":" in text


@dataclass(frozen=True)
class Verdict:
    """An answer judged: right (``ok``), bit-identical to the reference, and why not."""

    ok: bool
    identical: bool
    why: str = ""


@dataclass(frozen=True)
class Program:
    """A resolved app: ``name`` as the user wrote it, the rank class, ``main()``'s
    arguments, and the check (None: bit for bit; a shipped app: its ``module``)."""

    name: str
    cls: type
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    check: Callable | None = None
    check_name: str = ""
    module: ModuleType | None = None

    @property
    def key(self) -> tuple:
        """What makes two failure-free runs the same (with ranks and transport)."""
        return (self.name, repr(self.args), repr(sorted(self.kwargs.items())))

    @property
    def checked_by(self) -> str:
        """How the answer is judged, in words."""
        if self.module is not None:
            return f"{self.name}'s own verification and the failure-free answer"
        if self.check is not None:
            return self.check_name
        return "bit for bit against the failure-free run"

    def argv(self) -> list[str]:
        """The command-line flags that give this program's arguments and check (for a
        replay command; a shipped app's settings are its own flags, not these)."""
        out = [f"--arg={_text(a)}" for a in self.args]
        out += [f"--kwarg={k}={_text(v)}" for k, v in self.kwargs.items()]
        if self.check is not None and self.check_name.startswith("--check "):
            out.append("--check=" + self.check_name.split(" ", 1)[1])
        return [shlex.quote(x) for x in out]

    def answer(self, result) -> tuple[bool, Any]:
        """``(self-verified, what is compared)`` of a run: a shipped app's verdict and
        summary record; a program's results (its check, if any, judges in ``judge``)."""
        if self.module is not None:
            ok, _, record = self.module.summarize(result)
            return bool(ok), record
        return True, list(result.results)

    def judge(self, answer: tuple[bool, Any], reference: Any) -> Verdict:
        """A run's ``answer`` against the failure-free run's (``answer(...)[1]`` of it)."""
        ok, got = answer
        if self.module is not None:
            close, identical = same_answer(got, reference)
            why = "" if close else "the answer differs from the failure-free run's"
            if not ok:
                why = f"{self.name}'s own verification failed"
            return Verdict(ok and close, identical, why)
        identical = same_bits(got, reference)
        if self.check is None:
            return Verdict(identical, identical, "" if identical else
                           "the results differ from the failure-free run's (bit for bit)")
        try:
            right = bool(self.check(got, reference))
            why = "" if right else f"{self.check_name} said the answer is wrong"
        except AssertionError as exc:
            right, why = False, f"{self.check_name}: {exc}"
        return Verdict(right, identical, why)


def resolve(name: str, args=(), kwargs: dict | None = None, check: str | None = None) -> Program:
    """The program ``name`` stands for (a shipped app or a reference, see the module).

    Raises:
        ValueError: an unknown app, a missing file or module, no such class, a class that
            is not an ``ft.Rank`` with ``async def main``, arguments its ``main()`` does
            not take, a check that cannot be found or a check given for a shipped app
            (which verifies itself; its ``args``/``kwargs`` are its ``main()``'s).
    """
    kwargs = dict(kwargs or {})
    if not is_reference(name):
        if name not in APPS:
            raise ValueError(f"unknown app {name!r}: one of {', '.join(APPS)}, or a program "
                             f"as {FORMS}")
        if check:
            raise ValueError(f"{name} is a shipped app: it verifies itself (--check is for "
                             f"programs)")
        mod = app_module(name)
        _check_arguments(name, mod.RANK_CLASS, args, kwargs)
        return Program(name, mod.RANK_CLASS, tuple(args), kwargs, module=mod)
    cls = _load(name, "program")
    from ..runtime import check_rank_class
    try:
        check_rank_class(cls)
    except TypeError:
        raise ValueError(f"{name}: {getattr(cls, '__qualname__', cls)!r} is not an ft.Rank "
                         f"subclass with 'async def main(self, ...)'") from None
    _check_arguments(name, cls, args, kwargs)
    if check is not None:
        fn, check_name = _load(check, "check"), f"--check {check}"
        if not callable(fn):
            raise ValueError(f"--check {check}: not a function")
    else:
        fn = getattr(cls, "verify", None)
        check_name = f"{cls.__qualname__}.verify"
        static = next((vars(k)["verify"] for k in cls.__mro__ if "verify" in vars(k)), None)
        if fn is not None and not isinstance(static, (staticmethod, classmethod)):
            raise ValueError(f"{name}: verify must be a staticmethod or classmethod "
                             f"verify(results, reference) (it runs in the driver, on "
                             f"every rank's results, not on a rank)")
    return Program(name, cls, tuple(args), kwargs, fn, check_name if fn else "")


def _check_arguments(name: str, cls: type, args, kwargs: dict) -> None:
    """Raise ValueError unless ``cls.main`` takes ``args`` and ``kwargs``."""
    try:
        inspect.signature(cls.main).bind(None, *args, **kwargs)
    except TypeError as exc:
        raise ValueError(f"{name}: main() does not take these arguments ({exc})") from None


def _load(ref: str, what: str):
    """The object ``ref`` (``module:attr`` or ``file.py:attr``) names."""
    where, _, attr = ref.rpartition(":")
    if not where or not attr.isidentifier():
        raise ValueError(f"{what} {ref!r}: expected {FORMS.replace('Class', 'NAME')}")
    if where.endswith(".py") or "/" in where or os.sep in where:
        module = _load_file(where, ref, what)
    else:
        module = _import(where, ref, what)
    try:
        return getattr(module, attr)
    except AttributeError:
        ranks = sorted(n for n, v in vars(module).items() if isinstance(v, type)
                       and getattr(v, "_ft_rank_class", False) and v.__module__ == module.__name__)
        raise ValueError(f"{what} {ref!r}: {where} has no {attr!r}"
                         + (f" (its ft.Rank classes: {', '.join(ranks)})" if ranks else "")
                         ) from None


def _load_file(path: str, ref: str, what: str) -> ModuleType:
    """The module of a program file, loaded once per file and kept in ``sys.modules``."""
    full = os.path.abspath(path)
    if not os.path.isfile(full):
        raise ValueError(f"{what} {ref!r}: no file {path!r}")
    for mod in list(sys.modules.values()):
        if getattr(mod, "__file__", None) == full:
            return mod
    if os.path.dirname(full) not in sys.path:
        sys.path.append(os.path.dirname(full))
    stem = os.path.splitext(os.path.basename(full))[0]
    name = stem if stem.isidentifier() and stem not in sys.modules else (
        f"ftactors_program_{abs(hash(full)):x}")
    spec = importlib.util.spec_from_file_location(name, full)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise ValueError(f"{what} {ref!r}: loading {path} failed: "
                         f"{type(exc).__name__}: {exc}") from exc
    return module


def _import(dotted: str, ref: str, what: str) -> ModuleType:
    """A program's module, importable from the current directory as ``python -m`` would."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError as exc:
        if exc.name and dotted.startswith(exc.name):
            raise ValueError(f"{what} {ref!r}: no module {dotted!r} (a program is {FORMS})"
                             ) from None
        raise


# -------------------------------------------------------------------- arguments
def literal(text: str) -> Any:
    """A command-line value: a Python literal (``64``, ``1e-6``, ``[1, 2]``, ``True``),
    else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _text(value: Any) -> str:
    """The command-line text ``literal`` reads back as ``value``."""
    if isinstance(value, str) and literal(value) == value:
        return value
    return repr(value)


def parse_kwargs(specs: list[str]) -> dict:
    """``--kwarg KEY=VALUE`` flags as a dict (values read by ``literal``).

    Raises:
        ValueError: a flag not of the form KEY=VALUE with KEY an identifier.
    """
    out = {}
    for spec in specs:
        key, eq, value = spec.partition("=")
        if not eq or not key.strip().isidentifier():
            raise ValueError(f"--kwarg takes KEY=VALUE (KEY a Python name), got {spec!r}")
        out[key.strip()] = literal(value)
    return out


def add_program_arguments(parser) -> None:
    """``--arg``, ``--kwarg`` and ``--check``: a program's arguments and check."""
    parser.add_argument("--arg", action="append", default=[], metavar="VALUE",
                        help="a positional argument of the program's main() (repeatable; "
                             "a Python literal, else text)")
    parser.add_argument("--kwarg", action="append", default=[], metavar="KEY=VALUE",
                        help="a keyword argument of the program's main() (repeatable)")
    parser.add_argument("--check", default=None, metavar="MODULE:FUNCTION",
                        help="check(results, reference) judges the answer (default: the "
                             "class's verify hook, else bit for bit against the "
                             "failure-free run)")


def program_from_args(name: str, args) -> Program:
    """The program of ``name`` with the ``add_program_arguments`` flags of ``args``."""
    return resolve(name, [literal(a) for a in args.arg], parse_kwargs(args.kwarg), args.check)


# -------------------------------------------------------------------- comparing
def same_answer(record: dict, reference: dict) -> tuple[bool, bool]:
    """(equal within 1e-9 relative, bit-identical): a shipped app's answer against the
    failure-free run's, timings left out."""
    keys = sorted(set(record) | set(reference))
    identical, close = True, True
    for key in (k for k in keys if k not in TIMING_KEYS):
        a, b = record.get(key), reference.get(key)
        try:
            same = bool(np.array_equal(np.asarray(a), np.asarray(b)))
            near = same or bool(np.allclose(np.asarray(a, float), np.asarray(b, float),
                                            rtol=1e-9, atol=0))
        except (TypeError, ValueError):
            same = near = a == b
        identical &= same
        close &= near
    return close, identical


def same_bits(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` are the same value bit for bit: arrays of one dtype and
    shape with the same bytes, floats with the same bits (``-0.0`` is not ``0.0``, a NaN
    equals itself), containers element by element, anything else by type and ``==``."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) or isinstance(a, np.generic):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype == object or b.dtype == object:
            return (a.shape == b.shape and b.dtype == a.dtype
                    and all(same_bits(x, y) for x, y in zip(a.ravel(), b.ravel())))
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, complex):
        return same_bits(a.real, b.real) and same_bits(a.imag, b.imag)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_bits(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_bits(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an object that cannot say: not the same
        return False

