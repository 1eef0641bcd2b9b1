"""Fixed cost: what a command imports, and the plain-Python walks that spare a small trace numba.

The plain walks must give what the compiled ones give, column for column and byte offset for byte
offset, on every real XSpace fixture (and on damaged copies of one); the commands that read no trace
must not import jax.
"""

import gc
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from rooflens.errors import RooflensError
from rooflens.trace.formats import compiled
from rooflens.trace.formats.xspace import decode as D
from rooflens.trace.formats.xspace import plain, walk
from rooflens.trace.formats.xspace import wire as W
from tests.conftest import FIXTURES, fixture_path

REPO = Path(__file__).resolve().parents[1]
WALKS = ("fields", "metadata_entries", "line_headers", "decode_events")
V6E = ("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb")


def _modules_after(code: str, tmp_path: Path, whole: bool = False) -> set[str]:
    """The top-level packages (``whole``: the modules) a fresh interpreter has imported after running ``code``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
           "ROOFLENS_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("ROOFLENS_NO_CACHE", None)
    name = "m" if whole else "m.split('.')[0]"
    probe = (f"import sys, json\n{code}\n"
             f"print(json.dumps(sorted({{{name} for m in sys.modules}})), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return set(json.loads(r.stderr.strip().splitlines()[-1]))


def _cli(*args: str) -> str:
    return f"from rooflens.cli import main\ntry:\n    main({list(args)!r})\nexcept SystemExit as e:\n    assert not e.code\n"


@pytest.mark.parametrize("args", [("--help",), ("chips",), ("chips", "tpu-v5e"), ("report", "--help")])
def test_commands_that_read_no_trace_import_no_jax(args, tmp_path):
    mods = _modules_after(_cli(*args), tmp_path)
    assert "rooflens" in mods and not mods & {"jax", "jaxlib", "numba", "llvmlite", "pyarrow", "numpy"}, sorted(mods)


def test_import_rooflens_is_light_and_every_public_name_resolves(tmp_path):
    mods = _modules_after("import rooflens as rl", tmp_path)
    assert not mods & {"jax", "jaxlib", "numba", "numpy"}, sorted(mods)
    import rooflens as rl

    for name in rl.__all__:
        assert getattr(rl, name) is not None, name
    assert callable(rl.capture) and rl.capture.__module__ == "rooflens.capture.capture"
    assert rl.chip("tpu-v5e").name == "tpu-v5e" and "tpu-v5e" in rl.chips()
    with pytest.raises(AttributeError):
        rl.no_such_name  # noqa: B018


def test_a_small_trace_is_reported_without_numba_or_jax(tmp_path):
    trace = fixture_path(*V6E)
    mods = _modules_after(_cli("report", str(trace), "--json"), tmp_path)
    assert not mods & {"numba", "llvmlite", "jax"}, sorted(mods)
    assert "jaxlib" in mods  # its HLO printer, for the programs the trace carries


def test_a_second_report_loads_neither_numba_nor_jaxlib_nor_numpy_ma(tmp_path):
    """A second report of a trace reads it, its aggregates and its printed HLO from the cache: jaxlib's HLO printer
    (25 ms), numba and numpy.ma (50 ms, imported by the first plain ``np.unique`` or ``np.median``) stay unloaded."""
    trace = tmp_path / "trace" / V6E[1]
    trace.parent.mkdir()
    trace.write_bytes(fixture_path(*V6E).read_bytes())
    first = _modules_after(_cli("report", str(trace), "--json"), tmp_path, whole=True)
    assert "jaxlib._hlo" in first  # printed once, for the programs the trace carries
    again = _modules_after(_cli("report", str(trace), "--json"), tmp_path, whole=True)
    assert not again & {"numba", "llvmlite", "jax", "jaxlib", "jaxlib._hlo", "numpy.ma"}, sorted(again)
    # a real H100 window's run directory (its HLO saved beside it, its steps marked), the same
    run = tmp_path / "run"
    shutil.copytree(fixture_path("gpu_nvidia", "h100_jax0112", "linen_gpt_window_command_buffers"), run)
    for _ in range(2):
        mods = _modules_after(_cli("report", str(run), "--json"), tmp_path, whole=True)
    assert not mods & {"numba", "llvmlite", "jax", "jaxlib", "numpy.ma"}, sorted(mods)


def test_kernels_imported_after_numba_loaded_call_each_other_through_dispatchers(tmp_path):
    """A large trace loads numba in its reader, before some analysis modules are imported (lazily). A kernel calling
    one declared after it in its module must then find a dispatcher under that name: ``rl.capture`` of an 8-layer
    transformer failed in a fresh process when ``warmup`` was imported last (numba met the ``Kernel`` object of
    ``_group_executions``, the module's last kernel), while a test run, importing it earlier, never did. Each module
    is imported in turn with numba loaded, and checked at once, before any later import could mend it."""
    code = textwrap.dedent("""
        import importlib, importlib.machinery, pkgutil, sys
        import rooflens
        from rooflens.trace.formats import compiled
        compiled.compile_kernels()
        bad, checked = set(), set()

        def check(module):  # the module just ran its body: nothing imported after it has mended its names yet
            checked.add(module.__name__)
            for k in compiled.kernels().values():
                if k.py_func.__module__ == module.__name__:
                    g = k.py_func.__globals__
                    bad.update(f"{module.__name__}.{k.__name__} -> {n}" for n in k.py_func.__code__.co_names
                               if isinstance(g.get(n), compiled.Kernel))

        class Checked(importlib.machinery.PathFinder):
            @classmethod
            def find_spec(cls, name, path=None, target=None):
                spec = super().find_spec(name, path, target)
                if spec is not None and name.startswith("rooflens.") and spec.loader is not None:
                    run = spec.loader.exec_module
                    def exec_module(module, run=run):
                        run(module)
                        check(module)
                    spec.loader.exec_module = exec_module
                return spec

        sys.meta_path.insert(0, Checked)
        names = sorted(m.name for m in pkgutil.walk_packages(rooflens.__path__, "rooflens.")
                       if ".mcp" not in m.name and not m.name.endswith("__main__"))
        for name in names:
            importlib.import_module(name)
        names = checked
        print(len(names), sorted(bad))
        # and the late module's kernels run: a real trace's executions, compiled, equal its numpy twin's
        import numpy as np
        import rooflens as rl
        from rooflens.trace import warmup
        t = rl.load(sys.argv[1]).table
        keys, inv = rl.trace.events.unique_rows(t.host, t.device, t.program)
        order = np.lexsort((t.start_ns, inv))
        bounds = np.concatenate([[0], np.cumsum(np.bincount(inv, minlength=len(keys)))])
        args = (order, bounds, t.name.astype(np.int64), max(len(t.names), 1), t.start_ns,
                warmup.control_names(t.names))
        runs = warmup.executions_of(*args)
        twin = compiled.kernels()["rooflens.trace.warmup.executions_of"].plain(*args)
        print(int(runs.max()) + 1, bool((runs == twin).all()))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
           "ROOFLENS_CACHE_DIR": str(tmp_path / "cache")}
    trace = fixture_path("gpu_nvidia", "h100_jax0112", "annotated_whole_run", "vm.xplane.pb")
    r = subprocess.run([sys.executable, "-c", code, str(trace)], capture_output=True, text=True,
                       env={**env, "ROOFLENS_NO_CACHE": "1"}, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    count, bad, runs = r.stdout.strip().splitlines()[-2].split(" ", 1) + [r.stdout.strip().splitlines()[-1]]
    assert int(count) > 100 and bad == "[]", bad
    executions, same = runs.split()
    assert int(executions) >= 2 and same == "True", runs


def test_the_command_leaves_its_garbage_to_the_system_and_loses_nothing(tmp_path, capsys):
    """``rooflens`` (and ``python -m rooflens.cli``) freezes the collector as it exits, sparing the ~0.2 s of
    finalizing numba's objects one by one: its report is written whole, its cache entries too (a second run reads
    them and says the same), while :func:`rooflens.cli.main` called in a process of its own keeps its collector."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
           "ROOFLENS_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("ROOFLENS_NO_CACHE", None)
    trace = fixture_path(*V6E)
    probe = ("import atexit, gc, sys\n"
             "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr))\n"
             "sys.argv[0] = 'rooflens'\nfrom rooflens.cli import command\ncommand()\n")
    docs = []
    for k in range(2):
        out = tmp_path / f"report{k}.json"
        r = subprocess.run([sys.executable, "-c", probe, "report", str(trace), "--json", "--out", str(out)],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stderr
        frozen = int(r.stderr.split("frozen ")[-1].split()[0])
        assert frozen > 1000, r.stderr  # the collector was kept from the process's objects
        docs.append(json.loads(out.read_text()))
        assert any((tmp_path / "cache").rglob("*")), "no cache entry written"
    assert docs[0]["comparison"] and docs[0]["comparison"] == docs[1]["comparison"]
    from rooflens.cli import main

    main(["chips", "--json"])
    capsys.readouterr()
    assert gc.get_freeze_count() == 0


def _decode(path: Path, walks: dict) -> object:
    """``decode.decode`` with the given walks in the kernels' places."""
    saved = {name: getattr(W, name) for name in WALKS}
    saved_rehash = walk.rehash
    try:
        for name in WALKS:
            setattr(W, name, walks[name])
        walk.rehash = walks["rehash"]
        return D.decode(path)
    finally:
        for name, fn in saved.items():
            setattr(W, name, fn)
        walk.rehash = saved_rehash


def _walks() -> tuple[dict, dict]:
    """(the compiled walks, their plain twins)."""
    compiled.compile_kernels()
    fast = {name: getattr(W, name) for name in WALKS} | {"rehash": compiled.rehash}
    slow = {name: getattr(plain, name) for name in WALKS} | {"rehash": compiled.plain_rehash}
    return fast, slow


def _same_columns(a, b) -> None:
    assert len(a.cols) == len(b.cols)
    for k, (x, y) in enumerate(zip(a.cols, b.cols)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=f"column {k}")
    assert a.strings == b.strings and a.line_names == b.line_names
    assert (a.origin_ns, a.events_total) == (b.origin_ns, b.events_total)
    for p, q in zip(a.planes, b.planes, strict=True):
        assert (p.name, p.stats, p.stat_names) == (q.name, q.stats, q.stat_names)
        np.testing.assert_array_equal(p.meta_rows, q.meta_rows)
        np.testing.assert_array_equal(p.stat_rows, q.stat_rows)


def test_plain_and_compiled_walks_decode_every_fixture_alike():
    files = sorted(p for p in FIXTURES.rglob("*.xplane.pb") if "corrupt" not in p.parts)
    if not files:
        pytest.skip("no XSpace fixtures (set ROOFLENS_FIXTURES)")
    fast, slow = _walks()
    for f in files:
        a, b = _decode(f, fast), _decode(f, slow)
        assert len(a) > 0, f
        _same_columns(a, b)


def test_plain_and_compiled_walks_break_at_the_same_byte(tmp_path):
    data = fixture_path(*V6E).read_bytes()
    fast, slow = _walks()
    cuts = [data[:n] for n in (len(data) // 5, len(data) // 3, len(data) // 2, len(data) - 7)]
    flipped = bytearray(data)
    flipped[len(data) // 4] ^= 0x80  # one varint's continuation bit: lengths and tags shift from there
    for k, blob in enumerate([*cuts, bytes(flipped)]):
        p = tmp_path / f"damaged{k}.xplane.pb"
        p.write_bytes(blob)
        said = []
        for walks in (fast, slow):
            try:
                said.append(_decode(p, walks))
            except RooflensError as e:
                said.append(str(e))
        if isinstance(said[0], str):
            assert said[0] == said[1]
        else:
            _same_columns(*said)


def test_plain_interning_fills_the_compiled_table():
    words = [f"fusion.{k % 300}".encode() * (1 + k % 3) for k in range(1000)] + [b"", b"x" * 8, b"x" * 9]
    buf = np.frombuffer(b"".join(words), np.uint8)
    spans, at = [], 0
    for w in words:
        spans.append((at, at + len(w)))
        at += len(w)
    compiled.compile_kernels()

    def table():
        return np.zeros(16, np.int64), np.zeros(16, np.int32), np.empty((8, 2), np.int64), np.zeros(1, np.int64)

    def run(code_of) -> tuple[list[int], tuple]:
        tk, tc, strs, nstr = table()
        codes = []
        for s, e in spans:
            while True:
                c = code_of(s, e, tk, tc, strs, nstr)
                if c >= 0:
                    break
                if 2 * (nstr[0] + 1) > len(tk):  # full: grown as the decoder grows it
                    tk, tc = compiled.rehash(tk, tc, len(tk) * 2)
                if nstr[0] >= len(strs):
                    strs = np.concatenate([strs, np.empty_like(strs)])
            codes.append(c)
        return codes, (tk, tc, strs[:nstr[0]], nstr)

    def plain_code(s, e, tk, tc, strs, nstr):
        return compiled.PlainInterner(buf.tobytes(), tk, tc, strs, nstr).code(s, e)

    a = run(lambda s, e, *t: compiled.intern(buf, s, e, *t))
    b = run(plain_code)
    assert a[0] == b[0] and len(set(a[0])) == len({bytes(w) for w in words})
    for x, y in zip(a[1], b[1]):  # tkeys, tcodes, the strings' positions, their count
        np.testing.assert_array_equal(x, y)
    for k in (7, 1000, 1001, 1002):  # 16 bytes; empty; exactly one word; one word and a byte
        assert compiled.plain_hash(words[k]) == compiled.hash_bytes(buf, *spans[k])


def test_self_times_twin_matches_the_compiled_walk():
    from rooflens.trace import load
    from rooflens.trace.stats import _self_times_plain, _self_times_sorted, line_groups

    # vLLM's Chrome trace: 346 ops overlap their neighbour by a rounding µs (neighbours, not children: XProf's
    # inclusion rule); the nesting itself is walked both ways on a CPU capture in test_twins.py
    t = load(fixture_path("tpu", "vllm_tpu_qwen3_2026_01_11_21_26_41.trace.json.gz")).table
    group = line_groups(t)
    start, dur = t.start_ps, t.dur_ps
    order = np.lexsort((-dur, start, group))
    compiled.compile_kernels()
    got = _self_times_plain(start, dur, group, order)
    np.testing.assert_array_equal(got, _self_times_sorted(start, dur, group, order))
    assert (got == t.dur_ps).all()  # no op wholly inside another on its line: each keeps its whole time


def test_a_twin_declared_once_numba_is_loaded_still_belongs_to_its_kernel(monkeypatch):
    """A module imported after numba has loaded (a test, a plugin) has each kernel's name bound to its dispatcher as
    soon as a later kernel is declared; its ``plain_twin`` still registers the twin on the kernel (it was lost: the
    reader's pair codes had no twin when the reader was first imported late)."""
    import textwrap
    import types

    compiled.compile_kernels()
    monkeypatch.setattr(compiled, "_KERNELS", list(compiled._KERNELS))
    late = types.ModuleType("late_kernels")
    exec(textwrap.dedent("""
        from rooflens.trace.formats.compiled import njit, plain_twin

        @njit(cache=False)
        def first(xs):  # calls a kernel declared after it, the module's last
            return last(xs) + 1

        @njit(cache=False)
        def total(xs):
            s = 0
            for x in xs:
                s += x
            return s

        @njit(cache=False)
        def twice(xs):
            return 2 * total(xs)

        @plain_twin(total, 4)
        def total_plain(xs):
            return int(sum(xs))

        @njit(cache=False)
        def last(xs):
            return xs[0]
    """), late.__dict__)
    k = compiled.kernels()["late_kernels.total"]
    assert k.plain is late.total_plain and k.dispatcher is late.total
    assert late.twice(np.arange(4)) == 12 == 2 * k.plain(np.arange(4))
    # the caller declared first finds its callee compiled (it met a Kernel object and numba failed to type it: the
    # reader's executions_of, declared before _group_executions, made rl.capture of an 8-layer transformer fail)
    assert late.first(np.arange(3) + 7) == 8
    with pytest.raises(TypeError, match="no kernel"):
        compiled.plain_twin(len, 4)(lambda xs: 0)


def test_a_kernel_runs_its_twin_for_small_inputs_until_numba_is_loaded(monkeypatch):
    monkeypatch.setattr(compiled, "_KERNELS", [])
    monkeypatch.setattr(compiled, "_compiled", False)
    calls = []

    @compiled.njit(cache=False)
    def total(xs):
        s = 0
        for x in xs:
            s += x
        return s

    @compiled.plain_twin(total, 4)
    def total_plain(xs):
        calls.append(len(xs))
        return int(sum(xs))

    assert total(np.arange(4)) == 6 and calls == [4] and total.dispatcher is None
    assert total(np.arange(5)) == 10 and calls == [4] and total.dispatcher is not None
    assert total(np.arange(3)) == 3 and calls == [4]  # once compiled, always compiled


def test_the_walk_looks_up_a_planes_dispatch_metadata_in_a_table_unless_its_ids_are_sparse():
    """The host lines' dispatch events are kept by (plane, metadata id): a table of flags by id per line, not a
    search per event (a tenth of the 1 GB trace's walk); ids too sparse for a table fall back to the search. On the
    real H100 whole-run capture: the table of its host plane flags exactly the metadata the reader wants (the
    ``PjitFunction(…)`` dispatches and the runtime's executions), and no other plane has one."""
    from rooflens.trace.formats.raw import DISPATCH_PREFIXES, EXECUTE_PREFIXES

    path = fixture_path("gpu_nvidia", "h100_jax0112", "annotated_whole_run", "vm.xplane.pb")
    x = D.decode(path)
    planes = x.planes
    want = D.dispatch_metadata(D.map_file(path)[1], planes)
    mask = (1 << 40) - 1
    flagged = {}
    for p in planes:
        table, search = W._wanted_of(want, p.index)
        assert not search
        flagged[p.name] = np.flatnonzero(table).tolist()
    host = [p for p in planes if flagged[p.name]]
    assert [p.name for p in host] == ["/host:CPU"]
    (plane,) = host
    assert flagged[plane.name] == sorted(int(k) & mask for k in want.tolist() if int(k) >> 40 == plane.index)
    names = [x.event_metadata(plane, m)[0] for m in flagged[plane.name]]
    assert names and all(n.startswith(DISPATCH_PREFIXES + EXECUTE_PREFIXES) for n in names), names
    table, search = W._wanted_of(want, -1)  # a line that keeps no dispatch events
    assert not search and len(table) == 0
    sparse = np.append(want, (plane.index << 40) | (W.WANTED_TABLE_MAX + 5))
    table, search = W._wanted_of(np.sort(sparse), plane.index)
    assert search and len(table) == 0

