"""The package's folders are its layers: every import runs down the layers, and no two
modules import each other, directly or around a circle.

Read from the source (every ``import``, function-local ones included), so an import
hidden in a function to dodge a cycle is still seen.
"""
import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ftactors"

#: bottom to top; a module may import its own layer and the layers below it. Layers in
#: one tuple are peers: neither imports the other.
LAYERS = [
    ("ftactors.base",),
    ("ftactors.engine",),
    ("ftactors.facade",),
    ("ftactors.runtime",),
    ("ftactors.transports", "ftactors.protocols"),
    ("ftactors",),  # the public names (__init__) and ft.run/ft.launch (_run)
    ("ftactors.apps",),
    ("ftactors.tools",),
    ("ftactors.__main__",),  # python -m ftactors
]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The ftactors modules that ``name`` imports (a package's submodule when the
    imported name is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
    return {m for m in found if m in known}


def layer_of(name: str) -> tuple[int, str]:
    best = None
    for rank, peers in enumerate(LAYERS):
        for prefix in peers:
            if (name == prefix or name.startswith(prefix + ".")) and (
                    best is None or len(prefix) > len(best[1])):
                best = (rank, prefix)
    assert best is not None, f"{name} belongs to no layer: add its folder to LAYERS"
    return best


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for src, targets in sorted(edges.items()):
        rank, folder = layer_of(src)
        for dst in sorted(targets):
            dst_rank, dst_folder = layer_of(dst)
            if dst_rank > rank or (dst_rank == rank and dst_folder != folder):
                bad.append(f"{src} ({folder}) imports {dst} ({dst_folder})")
    return bad


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges.get(v, ()):
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer():
    for name in modules():
        layer_of(name)


def test_imports_run_down_the_layers():
    assert upward_imports(graph()) == []


def test_no_import_cycles():
    assert cycles(graph()) == []


#: modules that still import another layer's private modules, and why (each an open issue)
PRIVATE_REACHES_LEFT: dict[str, str] = {}


def private_reaches(edges: dict[str, set[str]]) -> list[str]:
    """Imports of another layer's private module (a ``_name`` under its folder): a layer
    is used through the names its package exports (its ``__init__``)."""
    bad = []
    for src, targets in sorted(edges.items()):
        folder = layer_of(src)[1]
        for dst in sorted(targets):
            dst_folder = layer_of(dst)[1]
            inside = dst[len(dst_folder) + 1:].split(".") if dst != dst_folder else []
            if dst_folder != folder and any(part.startswith("_") for part in inside):
                bad.append(f"{src} imports {dst}")
    return bad


def test_layers_use_each_other_through_their_exports():
    left = {m for m in PRIVATE_REACHES_LEFT if m in modules()}
    assert left == set(PRIVATE_REACHES_LEFT), "an exception for a module that is gone"
    assert [r for r in private_reaches(graph())
            if r.split()[0] not in PRIVATE_REACHES_LEFT] == []


def test_the_export_check_sees_a_private_reach():
    edges = {"ftactors.protocols.x": {"ftactors.runtime._checkpoints", "ftactors.runtime",
                                      "ftactors.protocols.shared._y"},
             "ftactors._run": {"ftactors.transports._simloop", "ftactors._other"}}
    assert private_reaches(edges) == [
        "ftactors._run imports ftactors.transports._simloop",
        "ftactors.protocols.x imports ftactors.runtime._checkpoints"]


def test_every_layer_exports_what_it_names_in_all():
    """A layer's ``__all__`` names only what its package has (an export cannot rot)."""
    import importlib
    for folder in ("base", "engine", "facade", "runtime", "transports", "protocols"):
        package = importlib.import_module(f"ftactors.{folder}")
        assert [n for n in package.__all__ if not hasattr(package, n)] == [], folder


@pytest.mark.parametrize("edges, expected", [
    ({"ftactors.engine._a": {"ftactors.runtime._b"}, "ftactors.runtime._b": set()},
     ["ftactors.engine._a (ftactors.engine) imports ftactors.runtime._b (ftactors.runtime)"]),
    ({"ftactors.protocols.x": {"ftactors.transports.y"}, "ftactors.transports.y": set()},
     ["ftactors.protocols.x (ftactors.protocols) imports ftactors.transports.y "
      "(ftactors.transports)"]),
    ({"ftactors.tools.a": {"ftactors.engine._b"}, "ftactors.engine._b": set()}, []),
])
def test_the_layer_check_sees_an_upward_import(edges, expected):
    assert upward_imports(edges) == expected


def test_the_cycle_check_sees_a_circle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]


# ------------------------------------------- protocols and the coordinator: one door
from ftactors.runtime._recovery_context import HOST_CALLS, RecoveryContext  # noqa: E402

PROTOCOLS = PACKAGE / "protocols"
CONTEXT = {name for name in dir(RecoveryContext) if not name.startswith("_")}
CALLS = {"call", "call_kept", "call_handle", "call_handle_kept"}
HIDDEN = ("ftactors.runtime._coordinator", "ftactors.runtime._host")


def _is_door(node, bound: set[str], door: str) -> bool:
    """``self.<door>``, or a name bound to it."""
    if isinstance(node, ast.Name):
        return node.id in bound
    return (isinstance(node, ast.Attribute) and node.attr == door
            and isinstance(node.value, ast.Name) and node.value.id == "self")


def _through(source: str, door: str):
    """``(node, bound)`` for every node of every function of ``source``, ``bound`` the
    names that function binds to ``self.<door>`` (``c = self.c``, ``st, ft = x, self.ft``,
    a parameter named ``door``)."""
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        bound = {a.arg for a in fn.args.args if a.arg == door}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                target = node.targets[0]
                pairs = (zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple)
                         and isinstance(node.value, ast.Tuple) else [(target, node.value)])
                bound |= {t.id for t, v in pairs
                          if isinstance(t, ast.Name) and _is_door(v, set(), door)}
        for node in ast.walk(fn):
            yield node, bound


def context_misuse(source: str, where: str = "<source>") -> list[str]:
    """What ``source`` (a protocol module) reads of the coordinator outside its
    ``RecoveryContext``, and the requests it names by a string instead of a handler."""
    bad = []
    for node, bound in _through(source, "c"):
        if isinstance(node, ast.Attribute) and _is_door(node.value, bound, "c"):
            if node.attr not in CONTEXT:
                bad.append(f"{where}:{node.lineno}: .{node.attr} is not in RecoveryContext")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in CALLS and _is_door(node.func.value, bound, "c")
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                and node.args[1].value not in HOST_CALLS):
            bad.append(f"{where}:{node.lineno}: request {node.args[1].value!r} named by "
                       f"a string, not its handler")
    return sorted(bad)


def test_protocols_use_the_coordinator_only_through_their_context():
    bad = []
    for path in sorted(PROTOCOLS.rglob("*.py")):
        name = module_name(path)
        bad += [f"{name} imports {m}" for m in imports(name, path, set(modules()))
                if m in HIDDEN]
        bad += context_misuse(path.read_text(), name)
    assert bad == []


def test_the_context_check_sees_a_reach_past_it():
    source = '''
class Policy:
    async def recover(self, failed):
        c, n = self.c, 3
        await c.fabric.call(c.handles[0], "x")
        self.c.events.record("e")
        await self.c.call(0, "standby_failure")
        await c.call(0, "pause")
'''
    assert context_misuse(source) == [
        "<source>:5: .fabric is not in RecoveryContext",
        "<source>:5: .handles is not in RecoveryContext",
        "<source>:7: request 'standby_failure' named by a string, not its handler"]


def test_every_coordinator_request_handler_has_a_caller():
    """A request is named by its handler (``Mixin.ft_rpc_x``): one that nothing names is
    dead code."""
    source = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    handlers = set(re.findall(r"def (ft_rpc_\w+)\(", source))
    assert handlers and {h for h in handlers if f".{h}" not in source} == set()


# -------------------------------------------- protocols and their rank: one door too
from ftactors.runtime._rank_context import LinkContext, RankContext  # noqa: E402


def members(context: type) -> set[str]:
    """The names a context declares (attributes and methods)."""
    names = set(getattr(context, "__annotations__", {}))
    names |= {n for n, v in vars(context).items() if callable(v) and not n.startswith("_")}
    return names


RANK_SIDE, LINK_SIDE = members(RankContext), members(LinkContext)


def endpoint_misuse(source: str, where: str = "<source>") -> list[str]:
    """What ``source`` (a protocol module) reads of its rank's endpoint and link outside
    ``RankContext`` and ``LinkContext``."""
    bad = []
    for node, bound in _through(source, "ft"):
        if not isinstance(node, ast.Attribute):
            continue
        if _is_door(node.value, bound, "ft") and node.attr not in RANK_SIDE:
            bad.append(f"{where}:{node.lineno}: ft.{node.attr} is not in RankContext")
        inner = node.value
        if (isinstance(inner, ast.Attribute) and inner.attr == "link"
                and _is_door(inner.value, bound, "ft") and node.attr not in LINK_SIDE):
            bad.append(f"{where}:{node.lineno}: ft.link.{node.attr} is not in LinkContext")
    return sorted(bad)


def test_protocols_use_their_rank_only_through_its_context():
    bad = []
    for path in sorted(PROTOCOLS.rglob("*.py")):
        bad += endpoint_misuse(path.read_text(), module_name(path))
    assert bad == []


def test_the_endpoint_check_sees_a_reach_past_it():
    source = '''
class Mixin:
    def on_send(self, env):
        st, ft = self._x, self.ft
        ft._outbox.clear()
        self.ft.link.send(1, [env])
        return ft.position

def helper(ft, env):
    ft.matcher.arrive(env)
'''
    assert endpoint_misuse(source) == [
        "<source>:10: ft.matcher is not in RankContext",
        "<source>:5: ft._outbox is not in RankContext",
        "<source>:6: ft.link.send is not in LinkContext"]


async def test_the_rank_contexts_name_what_the_endpoint_and_link_have():
    """The declarations cannot drift from the engine: every name they give exists."""
    from ftactors.engine._endpoint import Endpoint, Link

    endpoint = Endpoint(0, 2, Link(), owner=None)  # (it takes the running loop)
    assert {n for n in RANK_SIDE if not hasattr(endpoint, n)} == set()
    assert {n for n in LINK_SIDE if not hasattr(Link, n)} == set()


def test_the_recovery_context_names_nothing_no_protocol_uses():
    """A member of the door that no coordinator side uses is dead weight on it."""
    source = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py")
                       if p.name != "_recovery_context.py")
    assert {n for n in CONTEXT if not re.search(rf"\.{n}\b", source)} == set()


def option_reads_with_a_default(source: str, names: set[str]) -> list[str]:
    """``x.get("name", ...)`` or ``x.get("name")`` of a declared option: a default written
    again at the read site (or None where the declaration says otherwise)."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get" and node.args
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in names):
            bad.append(f"line {node.lineno}: .get({node.args[0].value!r}, ...)")
    return bad


def test_protocols_read_their_options_through_the_declarations():
    """A protocol reads its options with ``declared_values`` (in its folder's
    ``options.py``), so a default is written once, in its declaration."""
    from ftactors.protocols import PROTOCOLS
    from ftactors.runtime._options import stack_options
    names = set(stack_options(PROTOCOLS.values()))
    bad = {str(p.relative_to(PACKAGE)): found for p in sorted((PACKAGE / "protocols").rglob("*.py"))
           if (found := option_reads_with_a_default(p.read_text(), names))}
    assert bad == {}


def test_the_option_read_check_sees_a_default_at_a_read_site():
    source = "def f(opts):\n    return opts.get('rs_interval', 5), opts.get('other', 1)\n"
    assert option_reads_with_a_default(source, {"rs_interval"}) == [
        "line 2: .get('rs_interval', ...)"]


# ------------------------------------------- the runtime and its transports: Fabric
from ftactors.runtime._fabric import Fabric  # noqa: E402

FABRIC_SIDE = members(Fabric)


def fabric_misuse(source: str, where: str = "<source>") -> list[str]:
    """What ``source`` (a runtime module) reads of a fabric outside ``Fabric``: any
    ``<x>.fabric.<name>`` or ``fabric.<name>``."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        inner = node.value
        if ((isinstance(inner, ast.Name) and inner.id == "fabric")
                or (isinstance(inner, ast.Attribute) and inner.attr == "fabric")):
            if node.attr not in FABRIC_SIDE:
                bad.append(f"{where}:{node.lineno}: fabric.{node.attr} is not in Fabric")
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "getattr"
                and node.value.args and isinstance(node.value.args[0], ast.Attribute)
                and node.value.args[0].attr == "fabric"):
            bad.append(f"{where}:{node.lineno}: getattr on a fabric (declare it in Fabric)")
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and node.args
                and ((isinstance(node.args[0], ast.Attribute) and node.args[0].attr == "fabric")
                     or (isinstance(node.args[0], ast.Name) and node.args[0].id == "fabric"))):
            bad.append(f"{where}:{node.lineno}: {node.func.id}() probes a fabric: declare "
                       f"the capability in Fabric")
    return sorted(set(bad))


def test_the_runtime_uses_a_fabric_only_through_its_declaration():
    paths = [*sorted((PACKAGE / "runtime").rglob("*.py")), PACKAGE / "_run.py"]
    bad = []
    for path in paths:
        bad += fabric_misuse(path.read_text(), module_name(path))
    assert bad == []


def test_the_fabric_check_sees_a_reach_past_it():
    source = '''
async def f(self, fabric):
    await self.c.fabric.spawn(spec)
    self.fabric._plane = None
    if getattr(self.fabric, "hosts_here", False):
        fabric.route(0, 1, [])
'''
    assert fabric_misuse(source) == [
        "<source>:4: fabric._plane is not in Fabric",
        "<source>:5: getattr() probes a fabric: declare the capability in Fabric",
        "<source>:6: fabric.route is not in Fabric"]


def _fabrics() -> list[type]:
    from ftactors.transports.local import LocalFabric
    from ftactors.transports.sim import SimFabric
    fabrics = [LocalFabric, SimFabric]
    try:
        from ftactors.transports.ray import RayFabric
    except ImportError:  # (Ray is an optional dependency)
        return fabrics
    return fabrics + [RayFabric]


def _takes_as_declared(made, declared) -> bool:
    """``made`` can be called as ``declared`` says (positionally, as the runtime calls):
    as many positional parameters (more only with defaults), ``*args`` where declared."""
    def positional(sig):
        return [p for p in sig.parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]

    want, have = positional(declared), positional(made)
    star = any(p.kind is p.VAR_POSITIONAL for p in declared.parameters.values())
    return (len(have) >= len(want)
            and all(p.default is not p.empty for p in have[len(want):])
            and all((p.default is p.empty) <= (q.default is p.empty)
                    for p, q in zip(have, want))
            and (not star or any(p.kind is p.VAR_POSITIONAL
                                 for p in made.parameters.values())))


def test_the_signature_check_sees_a_method_called_otherwise():
    import inspect
    declared = inspect.signature(lambda self, handle, name, *args: None)
    assert _takes_as_declared(inspect.signature(lambda self, h, n, *a, t=1: None), declared)
    assert not _takes_as_declared(inspect.signature(lambda self, h, n: None), declared)
    assert not _takes_as_declared(inspect.signature(lambda self, h, *a: None), declared)
    assert not _takes_as_declared(inspect.signature(lambda self, h, n, x, *a: None), declared)


@pytest.mark.parametrize("fabric", _fabrics(), ids=lambda f: f.__name__)
def test_every_fabric_has_every_member_of_fabric_as_declared(fabric):
    """Each fabric class declares every member (attributes at class level), each method
    takes the declared parameters in their order (more only with defaults), and sync
    and async match."""
    import inspect
    bad = [f"{n}: missing" for n in sorted(FABRIC_SIDE)
           if n not in Fabric.__annotations__ and not hasattr(fabric, n)]
    bad += [f"{n}: no class-level value" for n in sorted(Fabric.__annotations__)
            if n != "on_report" and not hasattr(fabric, n)]
    for name in sorted(FABRIC_SIDE - set(Fabric.__annotations__)):
        declared, made = getattr(Fabric, name), getattr(fabric, name, None)
        if made is None:
            continue
        if inspect.iscoroutinefunction(declared) != inspect.iscoroutinefunction(made):
            bad.append(f"{name}: async in one, not in the other")
        if not _takes_as_declared(inspect.signature(made), inspect.signature(declared)):
            bad.append(f"{name}{inspect.signature(made)} is not {name}"
                       f"{inspect.signature(declared)}")
    assert bad == []


def test_the_fabric_declaration_names_nothing_the_runtime_does_not_use():
    """A member of ``Fabric`` that no runtime module uses is dead weight on it."""
    source = "\n".join(p.read_text() for p in [*(PACKAGE / "runtime").rglob("*.py"),
                                               PACKAGE / "_run.py"]
                       if p.name != "_fabric.py")
    assert {n for n in FABRIC_SIDE if not re.search(rf"\.{n}\b", source)} == set()


# ------------------------------------------------ the runtime and transports: short functions
FUNCTION_LINES_MAX = 60
"""The longest function (``def`` line to last line) of ``runtime/`` and ``transports/``:
a function a reader can hold whole; a longer one is split into the steps it takes."""

#: functions still longer, and why (each an open issue)
LONG_FUNCTIONS_LEFT: dict[str, str] = {}


def long_functions(source: str, where: str = "<source>") -> list[str]:
    """The functions of ``source`` longer than ``FUNCTION_LINES_MAX`` lines, as
    ``where:Qualified.name (lines)``."""
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                lines = child.end_lineno - child.lineno + 1
                if not isinstance(child, ast.ClassDef) and lines > FUNCTION_LINES_MAX:
                    found.append(f"{where}:{name} ({lines})")
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_no_function_of_the_runtime_or_a_transport_is_over_60_lines():
    found = []
    for folder in ("runtime", "transports"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            found += long_functions(path.read_text(), module_name(path))
    assert [f for f in found if f.rsplit(" ", 1)[0] not in LONG_FUNCTIONS_LEFT] == []
    gone = set(LONG_FUNCTIONS_LEFT) - {f.rsplit(" ", 1)[0] for f in found}
    assert gone == set(), "an exception for a function that is short now (or gone)"


def test_the_length_check_sees_a_long_method():
    body = "\n".join(f"        x{i} = {i}" for i in range(FUNCTION_LINES_MAX - 1))
    source = (f"class A:\n    def short(self):\n        pass\n\n"
              f"    async def long(self):\n{body}\n        def inner():\n            pass\n")
    assert long_functions(source) == [f"<source>:A.long ({FUNCTION_LINES_MAX + 2})"]


def test_the_chaos_wrapper_is_a_fabric_too():
    """The coordinator's fabric is the transport's, wrapped by ``ChaosFabric``: what it
    does not take passes through, so the wrapper still has every member of ``Fabric``."""
    from ftactors.runtime._chaos import KillPlan
    from ftactors.runtime._chaos_fabric import ChaosFabric
    from ftactors.transports.local import LocalFabric

    wrapped = ChaosFabric(LocalFabric({}), KillPlan((), "sigkill", None), run=None)
    assert isinstance(wrapped, Fabric) and isinstance(LocalFabric({}), Fabric)
    assert not isinstance(object(), Fabric)
    assert (wrapped.name, wrapped.hosts_here, wrapped.heartbeat_interval_s) == (
        "local", True, None)
