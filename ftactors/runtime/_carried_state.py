"""Whether a program's ``iterations()`` loops carry state from one iteration to the next,
read from its source (not run).

A rank restored past the top of its first loop with nothing registered resumes with every
variable as ``main()`` first set it. That loses something only if the loop carries state:
a task-farm worker that sends READY, receives a task and sends its result has nothing to
register, and ``NothingRegisteredWarning`` must not tell its user to register something
(``_notices``). A loop carries state when its body

* reads a local before assigning it (``total += x``, ``x = x * 0.5``), a local it
  assigned in an earlier iteration;
* assigns a local that the code after the loop reads (OSU's ``t_start = Wtime()`` at
  ``i == skip``, read after the loop);
* changes an object made before the loop in place: an attribute or item of ``self`` or of
  such a local (``self.n += 1``, ``seen[k] = v``, ``u[1:-1] = ...``), or calls one of its
  mutating methods (``history.append(r)``).

A receive buffer written by ``Recv`` is not counted (it is written before it is read, as
scratch space is). Where the source cannot be read, or a loop's iterator is not a direct
``self.iterations(...)`` call, the answer is "it may": the warning is kept.
"""
from __future__ import annotations

import ast
import functools
import inspect
import textwrap

from ._program_code import program_functions

MUTATORS = frozenset({
    "append", "extend", "insert", "add", "update", "setdefault", "pop", "popleft",
    "popitem", "remove", "discard", "clear", "appendleft", "extendleft", "sort",
    "reverse", "fill", "put", "resize", "itemset", "rotate"})
"""Methods that change their object in place (list, dict, set, deque, numpy array)."""


@functools.lru_cache(maxsize=64)
def loops_carry_state(cls: type) -> bool:
    """Whether any ``async for ... in self.iterations(...)`` loop of ``cls``'s program
    may carry state that ``register`` does not keep from one iteration to the next or
    past its end (True when it cannot tell). Read once per class (each restored rank
    of a run reports)."""
    trees: dict[str, list[ast.AST]] = {}  # a base's method of the same name too
    for fn in program_functions(cls):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
        except (OSError, TypeError, SyntaxError):
            return True
        trees.setdefault(fn.__name__, []).append(tree)
    funcs = [tree for same in trees.values() for tree in same]
    kept = {name for tree in funcs for name in _registered(tree)}
    for func in funcs:
        for node in ast.walk(func):
            if not isinstance(node, ast.AsyncFor):
                continue
            if not isinstance(node.iter, ast.Call):
                return True  # ``async for i in loop`` with ``loop = self.iterations(n)``
            if (isinstance(node.iter.func, ast.Attribute) and node.iter.func.attr == "iterations"
                    and _carries(node, func, trees, kept)):
                return True
    return False


def _registered(func: ast.AST) -> set[str]:
    """The attributes ``func`` registers (``self.register("x", ...)``) and the locals it
    binds to what ``register`` returned (``x = self.register("x", ...)``)."""
    def is_register(node):
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "register" and node.args
                and isinstance(node.args[0], ast.Constant))
    out = {n.args[0].value for n in ast.walk(func) if is_register(n)}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and is_register(node.value):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return out


def _carries(loop: ast.AsyncFor, func: ast.AST, trees: dict[str, list[ast.AST]],
             kept: set[str]) -> bool:
    """Whether ``loop`` (in ``func``) carries state that ``kept`` (registered attributes
    and locals bound to them) does not hold; ``trees``: the program's functions by name,
    for the methods the loop calls on ``self``."""
    target = _stored(loop.target)
    assigned = {n for stmt in loop.body for n in _stored_in(stmt)} - target
    if _exposed(loop.body, assigned, set(target)) is True:
        return True
    after = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Load) and n.lineno > loop.end_lineno}
    if assigned & after:
        return True
    body = [n for stmt in loop.body for n in ast.walk(stmt)]
    if _changes_in_place(body, {"self"} | (_locals(func) - assigned), kept):
        return True
    called = {n.func.attr for n in body if isinstance(n, ast.Call)
              and isinstance(n.func, ast.Attribute) and _base(n.func) == ("self", n.func.attr)}
    return any(_changes_in_place(list(ast.walk(tree)), {"self"}, kept)
               for name in called & trees.keys() for tree in trees[name])


def _changes_in_place(nodes: list[ast.AST], owners: set[str], kept: set[str]) -> bool:
    """Whether ``nodes`` change an object named by one of ``owners`` in place, unless
    ``kept`` holds it: store or delete an attribute or item of it, or call one of its
    ``MUTATORS``."""
    def unkept(expr):
        root, attr = _base(expr)
        return root in owners and root not in kept and (root != "self" or attr not in kept)
    for node in nodes:
        if (isinstance(node, (ast.Attribute, ast.Subscript))
                and isinstance(node.ctx, (ast.Store, ast.Del)) and unkept(node)):
            return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in MUTATORS and unkept(node.func.value)):
            return True
    return False


def _locals(func: ast.AST) -> set[str]:
    """Every name ``func`` binds or reads (its parameters included)."""
    return {n.id for n in ast.walk(func) if isinstance(n, ast.Name)} | {
        a.arg for a in ast.walk(func) if isinstance(a, ast.arg)}


def _base(node: ast.expr) -> tuple[str | None, str | None]:
    """The name an attribute or item chain starts from and its first attribute:
    ``("self", "a")`` for ``self.a[i].b``, ``("u", None)`` for ``u[1:-1]``."""
    attr = None
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            attr = node.attr
        node = node.value
    return (node.id if isinstance(node, ast.Name) else None), attr


def _stored(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Store)}


def _stored_in(stmt: ast.stmt) -> set[str]:
    """The locals ``stmt`` assigns (not inside functions it defines)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    out = set()
    for node in ast.iter_child_nodes(stmt):
        out |= _stored_in(node) if isinstance(node, ast.stmt) else _stored(node)
    return out


def _exposed(stmts: list[ast.stmt], assigned: set[str], defined: set[str]):
    """Walk ``stmts`` in order from the locals ``defined`` on entry: True as soon as one
    of ``assigned`` is read before this iteration assigned it on that path; else the
    locals defined when the block falls through (None: it never does)."""
    for stmt in stmts:
        if isinstance(stmt, (ast.Break, ast.Continue, ast.Return, ast.Raise)):
            return True if _reads(stmt, assigned, defined) else None
        if isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try)):
            heads = [getattr(stmt, f) for f in ("test", "iter") if hasattr(stmt, f)]
            if any(_reads(h, assigned, defined) for h in heads):
                return True
            inner = defined | (_stored(stmt.target) if hasattr(stmt, "target") else set())
            if isinstance(stmt, ast.Try):  # the body and its else, or a handler
                blocks = [stmt.body + stmt.orelse, *(h.body for h in stmt.handlers)]
            else:
                blocks = [stmt.body, stmt.orelse]
            outs = [_exposed(b, assigned, set(inner)) for b in blocks]
            if any(o is True for o in outs):
                return True
            if isinstance(stmt, (ast.If, ast.Try)):  # a loop's body may not run at all
                live = [o for o in outs if o is not None]
                defined = set.intersection(*live) if live else defined
            if _exposed(getattr(stmt, "finalbody", []), assigned, set(defined)) is True:
                return True
            continue
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                if _reads(item.context_expr, assigned, defined):
                    return True
                defined |= _stored(item.optional_vars) if item.optional_vars else set()
            out = _exposed(stmt.body, assigned, defined)
            if out is True or out is None:
                return out
            defined = out
            continue
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            if stmt.target.id in assigned and stmt.target.id not in defined:
                return True
        if _reads(stmt, assigned, defined):
            return True
        defined |= _stored_in(stmt)
    return defined


def _reads(node: ast.AST, assigned: set[str], defined: set[str]) -> bool:
    """Whether ``node`` reads one of ``assigned`` not yet ``defined``."""
    return any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
               and n.id in assigned and n.id not in defined for n in ast.walk(node))
