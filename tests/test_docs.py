"""README.md and the site's pages (docs/**/*.md) name only what exists: every file path,
every module attribute (``_escalation.PartLevels``), every ``Class.member`` and every code word
(``keep_base``, ``state_now``) they quote is in the tree, so a rename or a removal that
leaves the docs behind fails here instead of misleading a reader."""
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import benchmarks
import ftactors

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("docs/**/*.md"))]
SOURCES = [*ROOT.glob("ftactors/**/*.py"), *ROOT.glob("benchmarks/*.py"),
           *ROOT.glob("tests/**/*.py"), *ROOT.glob("cluster/**/*"), *ROOT.glob("experiments/*"),
           *ROOT.glob("examples/*"), ROOT / "pyproject.toml",
           ROOT / ".ci/run"]
NOT_PATHS = ("/", "DIR", "RESULTS_DIR", "s3://", "~", "events/<", "ray://", "../shared/",
             "results.parquet", "experiment.yaml")
"""Quoted paths that are absolute (a user's), placeholders, URIs, outside the repository,
or files a run writes into its results folder."""
EXTERNAL = {"ray": "ray", "np": "numpy", "numpy": "numpy", "pyarrow": "pyarrow",
            "asyncio": "asyncio", "cloudpickle": "cloudpickle"}
"""Libraries the docs quote names of: those names are looked up in the library."""
IDENT = r"[A-Za-z_]\w*"
EXTENSIONS = ("py", "md", "yaml", "yml", "toml", "json", "txt", "parquet", "png")


def quoted(doc: str) -> list[str]:
    """The inline code spans of ``doc`` (fenced blocks are examples: left out)."""
    text = re.sub(r"```.*?```", "", (ROOT / doc).read_text(), flags=re.S)
    return re.findall(r"`([^`\n]+)`", text)


def _words() -> set[str]:
    words = set()
    for path in SOURCES:
        if path.is_file() and path != Path(__file__).resolve():
            words.update(re.findall(IDENT, path.read_text(errors="ignore")))
    return words


WORDS = _words()


def _namespace() -> dict[str, list]:
    """Every module of ftactors and of the benchmarks by its dotted tails
    (``_escalation``, ``runtime._escalation``), and every class and function by its name."""
    found: dict[str, list] = {}
    for info in [*pkgutil.walk_packages(ftactors.__path__, "ftactors."),
                 *pkgutil.walk_packages(benchmarks.__path__, "benchmarks.")]:
        if info.name.endswith("__main__"):
            continue  # runs the command line
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional dependency (mpi4py for a bench anchor)
            continue
        parts = info.name.split(".")
        for i in range(1, len(parts)):
            found.setdefault(".".join(parts[i:]), []).append(module)
        for name, value in vars(module).items():
            if isinstance(value, type) or callable(value):
                found.setdefault(name, []).append(value)
    found.setdefault("ft", []).append(ftactors)
    return found


NAMES = _namespace()


def _has(owner, member: str) -> bool:
    """``member`` is an attribute of ``owner``, or (an instance attribute or a field
    set in code) a word of its source or of a base class's (a mixin sets its own)."""
    if hasattr(owner, member):
        return True
    for cls in getattr(owner, "__mro__", (owner,)):
        try:
            if re.search(rf"\b{member}\b", inspect.getsource(cls)):
                return True
        except (OSError, TypeError):
            pass
    return False


def _exists(path: str) -> bool:
    """A path from the repository's root, from ``ftactors/`` or from ``tests/``; a bare
    file name anywhere."""
    if any((ROOT / base / path).exists() for base in ("", "ftactors", "tests")):
        return True
    return "/" not in path.rstrip("/") and any(ROOT.glob(f"**/{path}"))


def path_problem(token: str) -> str | None:
    """Why a quoted path (``protocols/hc3i/machine.py``, ``cluster/``, ``runtime/_escalation.X``)
    names nothing in the repository (None: it exists)."""
    if _exists(token):
        return None
    module, _, attr = token.rpartition(".")
    if re.fullmatch(IDENT, attr) and attr not in EXTENSIONS and _exists(module + ".py"):
        return None if attr in WORDS else f"{token!r}: no {attr!r} in the tree"
    return f"no file {token!r}"


def name_problem(token: str) -> str | None:
    """Why a quoted dotted name or code word names nothing (None: it exists)."""
    parts = token.split("(")[0].split(".")
    if len(parts) == 1:
        return None if parts[0] in WORDS else f"no {parts[0]!r} in the tree"
    head, *rest = parts
    if head in EXTERNAL:
        return _external_problem(EXTERNAL[head], rest, token)
    # a variable named like its class (``run`` for an ``ft.Run``) stands for it
    owners = NAMES.get(head, []) + NAMES.get(head[:1].upper() + head[1:], [])
    if not owners:
        return None if all(p in WORDS for p in parts) else f"no {token!r} in the tree"
    for owner in owners:
        obj, ok = owner, True
        for member in rest:
            if not _has(obj, member):
                ok = False
                break
            obj = getattr(obj, member, None)
            if obj is None:
                break
        if ok:
            return None
    return f"{token!r}: {head} has no {'.'.join(rest)}"


def _external_problem(library: str, rest: list[str], token: str) -> str | None:
    obj = importlib.import_module(library)
    for i, member in enumerate(rest):
        if not hasattr(obj, member):
            try:  # a submodule not imported by its package (ray.cluster_utils)
                obj = importlib.import_module(".".join([library, *rest[:i + 1]]))
                continue
            except ImportError:
                return f"{token!r}: {library} has no {'.'.join(rest[:i + 1])}"
        obj = getattr(obj, member)
    return None


def problems(doc: str) -> list[str]:
    out = []
    for token in quoted(doc):
        token = token.strip()
        if token.startswith(NOT_PATHS) or " " in token or token.startswith("-"):
            continue
        if re.fullmatch(rf"[\w.-]+\.({'|'.join(EXTENSIONS)})|[\w.-]*/[\w./-]*", token):
            found = path_problem(token)
        elif re.fullmatch(rf"{IDENT}(\.{IDENT})+(\(\))?|{IDENT}\(\)", token) or (
                re.fullmatch(IDENT, token) and ("_" in token.strip("_") or
                                                re.search(r"[a-z][A-Z]", token))):
            found = name_problem(token)
        else:
            continue
        if found:
            out.append(found)
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_and_name_the_docs_quote_exists(doc):
    assert problems(doc) == []


def test_the_check_finds_what_is_gone():
    assert path_problem("protocols/no_such_module.py") == "no file 'protocols/no_such_module.py'"
    assert path_problem("runtime/_escalation.NoSuchClass")
    assert name_problem("Endpoint.no_such_method")
    assert name_problem("a_word_nowhere_in_the_tree")
    assert path_problem("runtime/_escalation.PartLevels") is None
    assert name_problem("Endpoint.snapshot") is None and name_problem("ft.run") is None
    assert name_problem("ray.no_such_call") and name_problem("ray.cluster_utils.Cluster") is None
