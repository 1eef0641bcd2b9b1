"""Which jitted function is the step: standard library only.

Loaded by path in the launched interpreter (like :mod:`rooflens.capture.stepwindow`, which counts the
calls and opens the window). Here: whose function and whose call a dispatch is (the script's own code,
told from jax, jaxlib, rooflens, the standard library and installed packages by their real
directories), which loops of the script's own code surround a call (:func:`loop_chain`, from the
source with ``ast``), what a program costs per call (:func:`work`, from XLA's compiled FLOPs and
bytes), and :func:`choose`: among the (function, call site) pairs called so far whose loops still run
around the call being dispatched, the shallowest loop's with the most work per call, a function that
a function of the same or a shallower loop has outpaced left out.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
from collections.abc import Callable

if __package__:
    from rooflens.capture import common
else:  # loaded by path, after the launcher loaded common the same way (its ``_sibling``)
    common = sys.modules["_rooflens_common"]

_UNWRAP_LIMIT = 32  # wrappers peeled off a jitted function, at most
program_name = common.program_name  # jit_<name>, as JAX names a jitted function's program


def names_function(name: str, function: str) -> bool:
    """Whether ``--step-fn name`` names ``function``: its own name or its program's."""
    return name in (function, program_name(function))


# ---- whose function, whose call ------------------------------------------------------------------

#: directories of code that is the user's even where it is installed (``rooflens run -m pkg``)
USER_DIRS: list[str] = []


@functools.lru_cache(maxsize=4096)
def is_script_code(filename: str) -> bool:
    """Whether a frame's file is the script's own code: not jax, jaxlib, rooflens, the standard
    library or an installed package (by their real directories), or under :data:`USER_DIRS`."""
    if USER_DIRS and filename and not filename.startswith("<") and common.under(os.path.realpath(filename), USER_DIRS):
        return True
    return not common.is_library(filename, installed=True)


def call_site(frame) -> tuple[str, int, str] | None:
    """(file, line, function) of the innermost frame of the script's own code from ``frame`` out,
    or None (a call from a library's own thread)."""
    while frame is not None:
        code = frame.f_code
        if is_script_code(code.co_filename):
            return code.co_filename, frame.f_lineno, code.co_name
        frame = frame.f_back
    return None


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


Loop = tuple[str, int]  # a loop of the script's code: (file, its first line)


@functools.lru_cache(maxsize=256)
def loops_by_line(filename: str) -> dict[int, tuple[int, ...]] | None:
    """Line → the loops of its own function (or module) that run it again and again, outermost first,
    each by its first line: the body of a ``for``, a ``while`` with its test, a comprehension; a
    ``def``'s or ``class``'s body starts with none (it runs where it is called). None when the source
    cannot be read or parsed."""
    try:
        with open(filename, "rb") as fh:
            tree = ast.parse(fh.read(), filename)
    except (OSError, SyntaxError, ValueError):
        return None
    loops: dict[int, tuple[int, ...]] = {}

    def mark(node, inside: tuple[int, ...]) -> None:
        for line in range(node.lineno, (getattr(node, "end_lineno", None) or node.lineno) + 1):
            loops[line] = inside

    def visit(node, inside: tuple[int, ...]) -> None:
        if hasattr(node, "lineno"):
            mark(node, inside)
        if isinstance(node, _SCOPES):
            for child in ast.iter_child_nodes(node):
                visit(child, () if child in node.body else inside)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            for child in ast.iter_child_nodes(node):
                visit(child, (*inside, node.lineno) if child in node.body else inside)
        elif isinstance(node, ast.While):
            for child in ast.iter_child_nodes(node):
                visit(child, inside if child in node.orelse else (*inside, node.lineno))
        elif isinstance(node, _COMPREHENSIONS):
            mark(node, (*inside, node.lineno))
            for child in ast.iter_child_nodes(node):
                visit(child, (*inside, node.lineno))
        else:
            for child in ast.iter_child_nodes(node):
                visit(child, inside)

    visit(tree, ())
    return loops


def loop_chain(frame) -> tuple[Loop, ...] | None:
    """The loops of the script's own code that enclose a call, over its whole stack, outermost first:
    the loops around each frame's current line (a frame on the same line as the one that called it, a
    comprehension's or a lambda's, adds only the loops that one lacks). None when a frame's source
    cannot be read."""
    chains: list[tuple[Loop, ...]] = []  # innermost frame first
    last = None
    while frame is not None:
        code = frame.f_code
        if is_script_code(code.co_filename):
            here = (code.co_filename, frame.f_lineno)
            table = loops_by_line(code.co_filename)
            if table is None:
                return None
            mine = tuple((code.co_filename, line) for line in table.get(frame.f_lineno, ()))
            if here == last and chains:  # the same line again: its loops once
                if len(mine) > len(chains[-1]):
                    chains[-1] = mine
            else:
                chains.append(mine)
                last = here
        frame = frame.f_back
    return tuple(loop for chain in reversed(chains) for loop in chain)


def encloses(outer: tuple[Loop, ...] | None, inner: tuple[Loop, ...] | None) -> bool:
    """Whether the loops ``outer`` (a candidate's) are all running around a call inside ``inner``: the
    same loops, or the first ones of them (unknown chains: assumed so)."""
    if outer is None or inner is None:
        return True
    return inner[:len(outer)] == outer


def where(site: tuple[str, int, str] | None) -> str:
    return f"{site[0]}:{site[1]} ({site[2]})" if site else ""


def peeled(fun):
    """The Python function a jitted function runs, its wrappers peeled off: ``functools.partial``, ``__wrapped__``
    (``functools.wraps``: shard_map, vmap, grad, Flax's and Equinox's jit wrappers) and ``jax.pmap``'s own function
    (:func:`pmapped_function`)."""
    for _ in range(_UNWRAP_LIMIT):
        if isinstance(fun, functools.partial):
            fun = fun.func
        elif getattr(fun, "__wrapped__", None) is not None:
            fun = fun.__wrapped__
        elif (inner := pmapped_function(fun)) is not None:
            fun = inner
        else:
            break
    return fun


def pmapped_function(fun):
    """The user's function inside ``jax.pmap``'s own, or None: since jax 0.8 a pmap runs as a jit of a shard_map of
    a function of jax's named ``_fun`` (so every pmapped function's program is ``jit__fun``), which holds the
    user's function as ``fun.f`` (a ``linear_util.WrappedFun``) in its closure."""
    code = getattr(fun, "__code__", None)
    if code is None or code.co_name != "_fun" or "fun" not in code.co_freevars or not getattr(fun, "__closure__", None):
        return None
    try:
        wrapped = fun.__closure__[code.co_freevars.index("fun")].cell_contents
    except (ValueError, IndexError):  # an empty cell
        return None
    inner = getattr(wrapped, "f", None)
    return inner if callable(inner) else None


def user_name(fun) -> str | None:
    """The name of the user's function a jitted function of jax's own runs (``train_step`` in ``jax.pmap``'s
    ``_fun``); None when the jitted function is not such a wrapper."""
    inner = None
    for _ in range(_UNWRAP_LIMIT):
        if getattr(fun, "__wrapped__", None) is not None:
            fun = fun.__wrapped__
        else:
            inner = pmapped_function(fun)
            break
    if inner is None:
        return None
    name = getattr(peeled(inner), "__name__", "")
    return name if name and name != "<lambda>" else None


def own_code_of(fun) -> str:
    """The file of the Python code a jitted function runs, its wrappers peeled off ("" if unknown)."""
    fun = peeled(fun)
    code = getattr(fun, "__code__", None)
    if code is None:  # a callable object: its class's __call__
        call = next((vars(k)["__call__"] for k in type(fun).__mro__ if "__call__" in vars(k)), None)
        code = getattr(call, "__code__", None)
    return code.co_filename if code is not None else ""


def kind_of(fun) -> str:
    """``"primitive"`` (JAX's eager dispatch of one primitive), ``"jax"`` (a function of JAX's own,
    or rooflens's) or ``"function"`` (the script's or a library's: a step program candidate)."""
    if getattr(fun, "_apply_primitive", False):
        return "primitive"
    filename = own_code_of(fun)
    core = common.core_library_dirs()
    if filename and not filename.startswith("<") and common.under(os.path.realpath(filename), core):
        return "jax"
    return "function"


class Candidate:
    """A (jitted function, call site) the script's own code dispatched before the window: a step
    function candidate, with its calls and what its program costs per call."""

    __slots__ = ("function", "site", "calls", "chain", "loops", "fn", "seen", "calls_at_choice")

    def __init__(self, function: str, site: tuple[str, int, str], chain: tuple[Loop, ...] | None, fn,
                 seen: int) -> None:
        self.function, self.site, self.chain, self.fn, self.seen = function, site, chain, fn, seen
        self.loops = None if chain is None else len(chain)  # its loop depth
        self.calls = 0
        self.calls_at_choice: int | None = None


def work(cost: tuple[float, float] | None) -> float:
    """How much work a program does per call, to rank programs by: its compiled FLOPs × bytes (the order
    of their geometric mean: more of both is more work; where they disagree, the larger ratio wins);
    -1 when its cost is unknown."""
    if cost is None:
        return -1.0
    return (cost[0] + 1.0) * (cost[1] + 1.0)


def choose(cands: list[Candidate], start: int, cost_of: Callable[[Candidate], tuple[float, float] | None],
           now: Candidate | None = None) -> Candidate | None:
    """The step function among what the script's own code has called so far, ``now`` being dispatched:
    of the candidates whose loops still run around ``now`` (a sampler's loop that ended before training
    began does not; the training loop around an evaluation loop does), those called from inside a loop
    (all of them when none is); leave out each one that fewer than ``start`` calls show to be rarer
    than a function of the same or a shallower loop that has reached ``start`` (an evaluation every N
    steps, a set-up call); then the shallowest loop's, and there the most work per call (compiled
    FLOPs and bytes), then the first one seen."""
    live = [c for c in cands if now is None or encloses(c.chain, now.chain)]
    if not live:
        return None
    looped = [c for c in live if c.loops is None or c.loops >= 1]
    pool = looped or live

    def loops(c: Candidate) -> int:
        return 1 if c.loops is None else c.loops

    reached = [loops(c) for c in pool if c.calls >= start]
    kept = [c for c in pool if c.calls >= start or not any(d <= loops(c) for d in reached)] or pool
    return min(kept, key=lambda c: (loops(c), -work(cost_of(c)), c.seen))


