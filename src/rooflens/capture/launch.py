"""The process side of ``rooflens run``: run a script exactly as ``python`` would, and profile it.

``rooflens run`` replaces itself (``exec``) with a fresh interpreter that loads this file by path,
without importing rooflens, numpy or JAX, and then runs the script in the interpreter's own
``__main__`` module with the ``sys.argv``, ``sys.path[0]``, stdin, cwd and environment that
``python script.py`` (or ``python -m module``) would give it. Nothing here touches JAX before the
script does:

* an import hook waits for the script to import JAX, and wraps three of its internals:
  ``xla_bridge.backends`` (the profiler starts right after the script's own first backend comes
  up, so ``jax.distributed.initialize()`` and the script's ``XLA_FLAGS``/``JAX_PLATFORMS`` work),
  ``compiler.backend_compile_and_load`` (each compilation's span, ``memory_analysis`` and XLA's
  buffer assignment and live ranges, dumped into a private directory), and
  ``profiler.start_trace`` (a script that starts its own trace gets it: ours stops first);
* once the backend is up: JAX's cache-miss explanations (kept out of the script's logging) and
  the ``log`` transfer guard (its lines are taken out of stderr, everything else passes through
  as it comes) are switched on where the script has not set them itself.

With a window (``--steps A:B``, ``--delay/--duration``) the backend coming up only arms the
recorders; :mod:`rooflens.capture.stepwindow` starts and stops the profiler mid-run, and
compilations (each with XLA's cost analysis of its program), cache misses and transfers are still
recorded over the whole run. A recompilation (:func:`.artifacts.classify_compiles`: JAX's own
cache-miss explanation of the function compiled, or a compilation of the script's function after its
first) counts in the report only inside the traced window; the others are kept in ``rooflens.json``
as ``recompilations_outside``; transfers too count only inside the window. The stderr tap is :mod:`.tap`, the files
saved after the script :mod:`.artifacts`, running the script as python would :mod:`.pyrun`.

Whatever happens (normal end, ``sys.exit``, an exception, Ctrl-C, SIGTERM) the trace is stopped
and written under an absolute path, then the script's own outcome is reproduced: its exit status,
its exit message, its traceback (without our frames); Ctrl-C exits 130, SIGTERM kills as before.
Each run gets its own run directory; the processes of one ``jax.distributed`` job share one (chosen
by process 0 through the job's key-value store) and name their files ``<host>.process<i>``.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import os
import signal
import socket
import sys
import threading
import time

HERE = os.path.abspath(__file__)


TOP = "."  # _sibling's package for a module at the package's top


def _sibling(name: str, package: str = ""):
    """A stdlib-only module beside this file, in the sibling ``package``, or at the package's top (``package`` =
    :data:`TOP`: ``rooflens.units``): imported normally inside rooflens, loaded by path in the launched
    interpreter (where importing the rooflens package would import numpy and JAX)."""
    if __package__:
        root = __package__.rsplit(".", 1)[0]
        return importlib.import_module(f"{root}.{name}" if package == TOP else f"{root}.{package}.{name}" if package
                                       else f"{__package__}.{name}")
    key = f"_rooflens_{package}_{name}" if package and package != TOP else f"_rooflens_{name}"
    if key not in sys.modules:
        folder = os.path.dirname(HERE)
        root = os.path.dirname(folder)
        path = (os.path.join(root, f"{name}.py") if package == TOP else
                os.path.join(root, package, f"{name}.py") if package else os.path.join(folder, f"{name}.py"))
        spec = importlib.util.spec_from_file_location(key, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


manifest = _sibling("manifest", "trace")
units = _sibling("units", TOP)  # before stepfn and memwatch, which format with it
common = _sibling("common")
tap = _sibling("tap")
artifacts = _sibling("artifacts")
stepfn = _sibling("stepfn")
stepwindow = _sibling("stepwindow")
pyrun = _sibling("pyrun")
memwatch = _sibling("memwatch")
KV_KEY = "rooflens/run_name"
KV_TIMEOUT_MS = 20_000
_COMPILE_SPANS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")


class _Terminated(BaseException):
    """SIGTERM, turned into an exception so that the profile is written before the process dies."""


class _State:
    def __init__(self, logdir: str, dump: bool, window: dict | None = None, max_trace_bytes: int | None = None) -> None:
        self.logdir = logdir
        self.max_trace_bytes = max_trace_bytes  # a whole run's trace: stopped early past this (memwatch)
        self.watch = None  # memwatch.Watch while a whole run's trace is open
        self.dump = dump
        spec = window or {}
        windowed = "steps" in spec or "duration_s" in spec
        self.window = stepwindow.Window(spec, _begin_trace, _stop_trace, _drain) if windowed else None
        # a whole run whose step function --step-fn names: its calls counted, the trace not windowed
        self.tally = stepwindow.Window(spec, _begin_trace, _stop_trace, _drain) \
            if spec.get("step_fn") and not windowed else None
        self.counter = self.window or self.tally  # what counts the script's jitted calls (None: nothing does)
        self.made: set[str] = self.counter.made if self.counter is not None else set()  # the script's jitted functions
        self.calibration_file: str | None = None  # the chip 'local' a CPU run records
        self.armed = False  # the script's backend is up: compilations are recorded from here on
        self.tmp = ""  # where jax writes the trace before it is moved into the run directory
        self.dump_dir = ""
        self.run_name = ""
        self.label = socket.gethostname() or "host"
        self.process_index, self.process_count = 0, 1
        self.tracing = False
        self.starting = False
        self.saved_dir = ""  # set once the trace is written
        self.write_failed = False  # the profiler could not write its trace (a full disk): nothing is kept
        self.t0_unix_ns = 0
        self.t1_unix_ns = 0
        self.compiles: list[dict] = []
        self.spans: list[dict] = []
        self.misses: list[dict] = []
        self.transfers: list[str] = []
        self.transfer_times: list[float] = []
        self.explain_ours = False
        self.tap = None  # tap.StderrTap, while the transfer guard logs
        self.warnings: list[str] = []
        self.snapshot: bytes = b""
        self.notes: list[str] = []
        self.flags_added: list[str] = []  # XLA flags a whole run adds (whole_run_flags)
        self.armed_at = 0.0  # time.monotonic() when the script's backend came up
        self.drained_s: float | None = None  # how long the last wait for the devices took
        self.finishing = False  # the script has ended: _finish writes what was traced
        # JAX's Python tracer, a frame per Python call (what the host was doing in a gap): on for a window; off for a
        # whole run unless asked (--python-tracer). Its cost is per call for as long as the trace is open: a loop that
        # tokenizes 64 strings a step ran 2.8x slower under it and took 7.5 s more to stop (10x in all; 1.1x
        # without it), and its frames were most of a whole run's memory. Without it a gap names no Python frame,
        # which the report says (``python_tracer`` in rooflens.json)
        self.python_tracer = self.window is not None


S: _State | None = None


def _say(msg: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2 if S is None or S.tap is None else S.tap.saved, f"rooflens: {msg}\n".encode())


# ---- import hooks ------------------------------------------------------------------------------


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, hook) -> None:
        self.inner, self.hook = inner, hook

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        self.inner.exec_module(module)
        module.__loader__ = self.inner
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.inner
        try:
            self.hook(module)
        except Exception as e:  # never break the script's import of JAX
            _say(f"could not instrument {module.__name__} ({type(e).__name__}: {e}); the profile may lack parts")

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, hooks: dict) -> None:
        self.hooks = hooks

    def find_spec(self, name, path, target=None):
        hook = self.hooks.pop(name, None)
        if hook is None:
            return None
        if not self.hooks and self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, hook)
                return spec
        return None


def _hook_xla_bridge(xb) -> None:
    original = xb.backends

    def backends():
        result = original()
        if S is not None and not S.armed and not S.starting:
            _arm()
        return result

    backends.__wrapped__ = original
    backends.__doc__ = original.__doc__
    xb.backends = backends


def _compiling_own() -> bool | None:
    """Whether the jitted call compiling a program now is of the script's own function (True), of JAX's (False: one of
    ``jnp``'s jitted functions, or an eager primitive, compiled once per shape under a name a function of the
    script's may share, ``jit_add``), or not known (None: no jit's cache miss on the stack, another jax)."""
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if code.co_name == "apply_primitive" and code.co_filename.endswith("dispatch.py"):
            return False
        if code.co_name == "cache_miss" and code.co_filename.endswith("pjit.py"):
            fun = f.f_locals.get("fun")  # the jitted Python function (the closure's)
            return None if fun is None else stepwindow.kind_of(fun) == "function"
        f = f.f_back
    return None


def _hook_compiler(compiler) -> None:
    original = compiler.backend_compile_and_load

    def backend_compile_and_load(*args, **kwargs):
        options = kwargs.get("options", args[3] if len(args) > 3 else None)
        module = kwargs.get("module", args[1] if len(args) > 1 else None)
        if S is not None and S.armed and S.dump_dir and options is not None and _dumped(module):
            try:
                debug = options.executable_build_options.debug_options
                if not debug.xla_dump_to and "xla_dump_to" not in os.environ.get("XLA_FLAGS", ""):
                    debug.xla_dump_to = S.dump_dir
            except Exception:  # noqa: S110 (an older/newer options object: no dumps, nothing else changes)
                pass
        t0 = time.time()
        executable = original(*args, **kwargs)
        t1 = time.time()
        if S is not None and S.armed:
            rec = {"module": _module_name(module, executable), "start_unix_s": t0, "end_unix_s": t1,
                   "duration_s": t1 - t0, "where": common.user_frame(skip=(HERE,)), "own": _compiling_own()}
            try:
                ms = executable.get_compiled_memory_stats()
                rec["memory"] = {k: int(getattr(ms, k)) for k in dir(ms)
                                 if k.endswith("_in_bytes") and isinstance(getattr(ms, k), int)}
            except Exception:  # noqa: S110 (a backend without memory stats)
                pass
            cost = _cost(executable)
            if cost is not None:
                rec["flops"], rec["bytes_accessed"] = cost
                fn = S.counter.dispatching() if S.counter is not None else None
                if fn is not None:  # the script's jitted function being dispatched compiled this program
                    S.counter.compiled(fn, cost[0], cost[1], rec["module"])
            S.compiles.append(rec)
        return executable

    backend_compile_and_load.__wrapped__ = original
    compiler.backend_compile_and_load = backend_compile_and_load


def _hook_profiler(profiler) -> None:
    original = profiler.start_trace

    def start_trace(*args, **kwargs):
        if S is not None and S.tracing and not S.starting:
            S.notes.append("the script started its own profiler trace; rooflens's trace ends there")
            if S.window is not None:
                S.window.close()
            else:
                _stop_trace()
        return original(*args, **kwargs)

    start_trace.__wrapped__ = original
    start_trace.__doc__ = original.__doc__
    profiler.start_trace = start_trace


def _hook_pjit(pjit) -> None:
    if S is not None:  # without a window or --step-fn: only the names of the script's jitted functions
        stepwindow.hook_pjit(pjit, S.counter, S.made)


def _hook_annotations(profiler) -> None:
    _hook_profiler(profiler)
    if S is not None and S.window is not None:
        stepwindow.hook_step_annotation(profiler, S.window)


def _hook_monitoring(monitoring) -> None:
    def on_span(event, start, end, **kw):
        if S is not None and S.armed and event in _COMPILE_SPANS:
            S.spans.append({"event": event.rsplit("/", 1)[-1], "fun_name": str(kw.get("fun_name", "")),
                            "start_unix_s": float(start), "end_unix_s": float(end)})

    if hasattr(monitoring, "register_event_time_span_listener"):
        monitoring.register_event_time_span_listener(on_span)


def _cost(executable) -> tuple[float, float] | None:
    """(FLOPs, bytes accessed) per execution of a compiled program, from XLA's own cost analysis of the
    executable just compiled (tens of microseconds; nothing is compiled again); None where unavailable."""
    try:
        got = executable.cost_analysis()
    except Exception:
        return None
    if isinstance(got, (list, tuple)):  # older jaxlibs: one dict per computation
        got = got[0] if got else None
    if not isinstance(got, dict):
        return None
    return float(got.get("flops", 0.0) or 0.0), float(got.get("bytes accessed", 0.0) or 0.0)


def _dumped(module) -> bool:
    """Whether XLA dumps this compilation (its HLO and buffer assignment, for the report's memory view).
    A whole run dumps every program; a window only the script's own jitted functions: dumping each of
    jnp's small programs is most of what a windowed run would otherwise cost."""
    if S.window is None:
        return True
    return _module_name(module, None) in {stepwindow.program_name(f) for f in S.window.made}


def _module_name(module, executable) -> str:
    try:
        return executable.hlo_modules()[0].name
    except Exception:
        try:
            return str(module.operation.attributes["sym_name"]).strip('"')
        except Exception:
            return "unknown"


# ---- the trace window ---------------------------------------------------------------------------


class _MissFilter(logging.Filter):
    """Records JAX's cache-miss explanations; hides them unless the script asked for them itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:
            return True
        if "CACHE MISS" not in msg or S is None:
            return True
        S.misses.append({"t_unix_s": record.created, "text": msg.strip()})
        return not S.explain_ours


_MISS_LOGGERS = ("jax._src.interpreters.partial_eval", "jax._src.pjit", "jax._src.compiler",
                 "jax._src.compilation_cache", "jax._src.linear_util", "jax._src.util")
_filter = _MissFilter()


def _fresh_run_dir(base: str) -> str:
    """A run directory no other run uses (created here, so two runs cannot pick the same one)."""
    os.makedirs(base, exist_ok=True)
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S")
    for n in range(1, 1000):
        name = stamp if n == 1 else f"{stamp}_{n}"
        try:
            os.mkdir(os.path.join(base, name))
            return name
        except FileExistsError:
            continue
    raise OSError(f"no free run directory name under {base}")


def _arm() -> None:
    """The script's JAX backend is up: the run directory, the recorders, and the trace (or its window)."""
    S.starting = True
    try:
        import tempfile

        import jax
        from jax._src import distributed

        gs = distributed.global_state
        client = getattr(gs, "client", None)
        if client is not None and (getattr(gs, "num_processes", 1) or 1) > 1:
            S.process_index, S.process_count = int(gs.process_id or 0), int(gs.num_processes)
            S.label = f"{S.label}.process{S.process_index}"
        base = os.path.join(S.logdir, "plugins", "profile")
        if S.process_count > 1 and S.process_index != 0:
            try:
                S.run_name = client.blocking_key_value_get(KV_KEY, KV_TIMEOUT_MS)
                os.makedirs(os.path.join(base, S.run_name), exist_ok=True)
            except Exception:
                S.run_name = _fresh_run_dir(base)
                S.notes.append("process 0 of the job published no run directory; this process wrote its own")
        else:
            S.run_name = _fresh_run_dir(base)
            if S.process_count > 1:
                try:
                    client.key_value_set(KV_KEY, S.run_name)
                except Exception as e:
                    S.notes.append(f"could not share the run directory with the job ({type(e).__name__})")
        S.tmp = tempfile.mkdtemp(prefix=f".trace-{os.getpid()}-", dir=S.logdir)
        try:  # the barrier that drains the devices, compiled now: neither recorded nor traced
            common.drain_devices.prepare()
        except Exception as e:
            S.notes.append(f"could not prepare the wait for the devices ({type(e).__name__}: {e})")
        if S.dump:
            S.dump_dir = tempfile.mkdtemp(prefix=f".xla-dump-{os.getpid()}-", dir=S.logdir)
        cfg = jax.config
        if not cfg.jax_explain_cache_misses:
            S.explain_ours = True
            cfg.update("jax_explain_cache_misses", True)
        for name in _MISS_LOGGERS:
            logging.getLogger(name).addFilter(_filter)
        guards = ("jax_transfer_guard_host_to_device", "jax_transfer_guard_device_to_host",
                  "jax_transfer_guard_device_to_device")
        if all(getattr(cfg, g, None) is None for g in guards):
            S.tap = tap.StderrTap(_on_transfer)
            for g in guards:
                cfg.update(g, "log")
        S.armed = True
        S.armed_at = time.monotonic()
        if S.window is not None:
            S.window.arm()
        else:
            _begin_trace()
    except Exception as e:
        _say(f"could not start the profiler ({type(e).__name__}: {e}); the script runs unprofiled")
    finally:
        S.starting = False


def _on_transfer(line: str, at_unix_s: float) -> None:
    S.transfers.append(line)
    S.transfer_times.append(at_unix_s)


def _begin_trace() -> bool:
    """Start the profiler (the whole run's trace, or a window's); whether it started."""
    from jax._src import profiler as jprof

    S.starting = True
    try:
        S.t0_unix_ns = time.time_ns()
        if S.python_tracer:
            jprof.start_trace(S.tmp)
        else:
            options = jprof.ProfileOptions()
            options.python_tracer_level = 0
            jprof.start_trace(S.tmp, profiler_options=options)
        S.tracing = True
        if S.window is None and S.max_trace_bytes:
            S.watch = memwatch.Watch(S.max_trace_bytes, _stop_for_memory)
    except Exception as e:
        _say(f"could not start the profiler ({type(e).__name__}: {e}); the script runs unprofiled")
    finally:
        S.starting = False
    return S.tracing


def _stop_for_memory() -> None:
    """The memory watch's limit was reached (on its thread): stop the trace now, say why; the script runs on."""
    if S.finishing or not S.tracing:  # the trace is stopping anyway
        S.watch.stopped = None
        return
    _say(S.watch.stopped["said"] + ".")
    with contextlib.suppress(BaseException):
        _stop_trace()


def _stop_trace() -> None:
    """Wait until the devices have finished everything dispatched (no async tail: a loop that
    exits with steps still queued has them run inside the trace), then stop the trace and move it
    into the run directory (once; safe to call at any time, from any thread)."""
    if S is not None and S.watch is not None:
        S.watch.close()
    with _stop_lock:
        if S is None or not S.tracing:
            return
        interrupted = _drain()
        S.tracing = False
        _write_trace()
    if interrupted is not None and not S.finishing:  # mid-script: the interruption is the script's
        raise interrupted


def _drain() -> BaseException | None:
    """``common.drain_devices()`` on this thread (the script's thread at its end or at a window's
    edge: the stream its work was dispatched on). A SIGTERM (or Ctrl-C mid-script) while it waits
    stops the wait: the trace then stops without the work still queued, says so, and the
    interruption is returned (to be raised again once the trace is written)."""
    t0 = time.monotonic()
    try:
        common.drain_devices()
    except Exception as e:
        S.notes.append(f"could not wait for the devices to finish ({type(e).__name__}: {e}); the trace may miss "
                       "the last executions dispatched")
        return None
    except BaseException as e:  # Ctrl-C, SIGTERM: stop waiting, keep what was traced
        S.notes.append(f"interrupted ({type(e).__name__}) while waiting for the devices to finish the work "
                       "dispatched; the trace may miss its last executions")
        return e
    S.drained_s = time.monotonic() - t0
    return None


_stop_lock = threading.Lock()


def _write_trace() -> None:
    import shutil

    from jax._src import profiler as jprof

    with contextlib.suppress(Exception):
        S.snapshot = jprof.device_memory_profile()
    run_dir = os.path.join(S.logdir, "plugins", "profile", S.run_name)
    try:
        xspace = _stop_session(jprof)
        S.t1_unix_ns = time.time_ns()
        if xspace is not None:
            os.makedirs(run_dir, exist_ok=True)
            _write_new(os.path.join(run_dir, S.label + ".xplane.pb"), xspace)
            S.saved_dir = run_dir
            shutil.rmtree(S.tmp, ignore_errors=True)
            return
    except Exception as e:  # a full disk, a file-size limit: what it wrote is partial, so none of it is kept
        _say(f"the profiler failed to write its trace, so no profile was kept ({type(e).__name__}: {e}).")
        S.write_failed = True
        return
    _move_exported(run_dir)


def _stop_session(jprof) -> bytes | None:
    """Stop jax's profiler session and return its XSpace, serialized; ``None`` once it has written the trace
    itself. ``jax.profiler.stop_trace`` would also convert the whole trace to a gzipped Chrome JSON, which
    nothing reads here and which took longer than the collection itself (3,000 steps of a small loop: 0.5 s
    to collect, 1.2–1.4 s to write both files). Where jax's profiler state is not the one this was written
    against, its own ``stop_trace`` writes both files, as before."""
    state = getattr(jprof, "_profile_state", None)
    session = getattr(state, "profile_session", None)
    lock = getattr(state, "lock", None)
    if session is None or lock is None or not hasattr(session, "stop") or not hasattr(state, "reset"):
        jprof.stop_trace()
        return None
    with lock:
        xspace = session.stop()
        state.reset()
        with contextlib.suppress(Exception):
            jprof.clear_metadata()
    return bytes(xspace)


def _write_new(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all."""
    part = path + ".part"
    try:
        with open(part, "wb") as f:
            f.write(data)
        os.replace(part, path)
    finally:
        with contextlib.suppress(OSError):
            os.remove(part)


def _move_exported(run_dir: str) -> None:
    """Move the files ``jax.profiler.stop_trace`` wrote under ``S.tmp`` into the run directory."""
    import shutil

    os.makedirs(run_dir, exist_ok=True)
    moved = False
    for root, _, files in os.walk(S.tmp):
        for f in files:
            for suffix in (".xplane.pb", ".trace.json.gz"):
                if f.endswith(suffix):
                    os.replace(os.path.join(root, f), os.path.join(run_dir, S.label + suffix))
                    moved = True
    shutil.rmtree(S.tmp, ignore_errors=True)
    if moved:
        S.saved_dir = run_dir


# ---- after the script -----------------------------------------------------------------------------


def _finish(target: dict, outcome: dict) -> None:
    """Stop the trace, write everything, say where. Never raises."""
    S.finishing = True
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        said = ""
        if S.window is not None:
            S.window.close()
            said = S.window.shortfall(time.monotonic() - S.armed_at if S.armed_at else None)
            if said:
                _say(said + ".")
        _stop_trace()
        transfers_open = S.tap is not None
        if transfers_open:
            S.tap.close()
            S.tap = None
        if not S.saved_dir:
            if not (said or S.write_failed):  # else said already (a window never reached, a failed write)
                _say("the profiler wrote no trace." if S.run_name else
                     "the script started no JAX backend, so there is nothing to profile.")
            _cleanup_empty()
            return
        first, again = artifacts.classify_compiles(S.compiles, S.misses, S.made)
        stopped = S.watch.stopped if S.watch is not None else None
        end_ns = stopped["at_unix_s"] * 1e9 if stopped else S.t1_unix_ns  # a stop for memory: when it began
        # recompilations count only inside the traced window; the others are kept, marked outside
        again, outside = artifacts.split_by_trace(again, S.t0_unix_ns / 1e9, end_ns / 1e9)
        if S.window is not None or stopped:  # only the trace's transfers
            kept = [k for k, t in enumerate(S.transfer_times) if S.t0_unix_ns <= t * 1e9 <= end_ns]
            S.transfers, S.transfer_times = [S.transfers[k] for k in kept], [S.transfer_times[k] for k in kept]
        meta = {
            "captured_by": "rooflens run", "warmup_in_window": S.window is None, **target,
            "exit": outcome, "when_unix_s": S.t0_unix_ns / 1e9, "wall_s": (S.t1_unix_ns - S.t0_unix_ns) / 1e9,
            "trace_start_unix_ns": S.t0_unix_ns, "trace_stop_unix_ns": S.t1_unix_ns,
            "process_index": S.process_index, "process_count": S.process_count, "host_label": S.label,
            "python": sys.version.split()[0], "notes": S.notes, "xla_flags_added": S.flags_added,
            "python_tracer": S.python_tracer,
            "in_window": {"compilations": again, "first_compilations": first, "recompilations_outside": outside,
                          "cache_misses": [m["text"] for m in artifacts.explained(S.misses, again)],
                          "all_cache_misses": S.misses,
                          "transfers": S.transfers, "transfer_times_unix_s": S.transfer_times,
                          "compile_spans": S.spans,
                          "transfer_guard": "log" if transfers_open else "the script's own (transfers not counted)"},
        }
        try:
            import jax

            devices = jax.devices()
            meta.update({"jax_version": jax.__version__, "backend": jax.default_backend(),
                         "device_kind": devices[0].device_kind, "num_devices": len(devices),
                         "num_local_devices": jax.local_device_count(),
                         "devices": [{"id": d.id, "kind": d.device_kind, "platform": d.platform,
                                      "process_index": d.process_index} for d in devices],
                         "device_memory_bytes": common.device_memory_bytes(devices[0])})
        except Exception as e:
            meta["devices_error"] = f"{type(e).__name__}: {e}"
        if S.window is not None:
            meta["window"] = S.window.describe()
            meta["step_program"] = S.window.step_program()
        elif S.tally is not None:  # a whole run with --step-fn: the function it names, if the script called it
            taken = S.tally.step_program()
            if taken is not None:
                meta["step_program"] = taken
            else:
                S.notes.append(S.tally.unknown_step_fn())
                _say(S.tally.unknown_step_fn() + "; the whole run was traced, its report chooses the step itself.")
        if S.drained_s is not None:
            meta["drained_s"] = round(S.drained_s, 6)
        if meta.get("backend") == "cpu":  # the CPU's calibration it is priced against, kept with the run
            meta["calibration"] = manifest.calibration_record(S.calibration_file)
        if stopped:
            meta["trace_stopped"] = stopped
        meta = manifest.RunManifest.from_dict(meta).to_dict()  # the typed manifest's document
        artifacts.save(S, meta, {stepwindow.program_name(f) for f in meta.get("window", {}).get("programs") or []}
                       if S.window is not None else None)
        _say(f"profile written to {S.saved_dir}; read it with: rooflens report {S.saved_dir}")
    except Exception as e:
        _say(f"writing the profile failed ({type(e).__name__}: {e})")
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)


def _cleanup_empty() -> None:
    import shutil

    for d in (S.tmp, S.dump_dir):
        if d:
            shutil.rmtree(d, ignore_errors=True)
    if S.run_name and S.process_index == 0:
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(S.logdir, "plugins", "profile", S.run_name))


# ---- running the script as python would ---------------------------------------------------------


def _trim(tb):
    """The traceback from the script's first frame on (ours and runpy's left out)."""
    while tb is not None:
        f = tb.tb_frame.f_code.co_filename
        if f not in (HERE, pyrun.__file__) and not f.endswith(("runpy.py", "<frozen runpy>")) and f != "<string>":
            break
        tb = tb.tb_next
    return tb


#: XLA's command buffers off for a whole run's trace. The trace is open when the step's command buffers first run,
#: and on jaxlib 0.11.2 and an H100 that first run failed (``CUDA_ERROR_LAUNCH_FAILED``, "Failed to check stream
#: capturing status") under a bare ``jax.profiler`` trace as under rooflens run, an Equinox GPT's first step; the
#: same run with them off ran. Under a profiler XLA runs a command buffer one thunk at a time anyway
#: (``--xla_enable_command_buffers_during_profiling`` is off by default), so the traced work is the same, and each
#: kernel names its own op. A window's trace opens after they first ran, and keeps them.
COMMAND_BUFFERS_OFF = "--xla_gpu_enable_command_buffer="


def whole_run_flags(environ) -> list[str]:
    """The XLA flags a whole run's trace adds to ``environ["XLA_FLAGS"]`` (added there): none where the script's
    own flags already choose command buffers."""
    flags = environ.get("XLA_FLAGS", "")
    if "command_buffer" in flags:
        return []
    environ["XLA_FLAGS"] = f"{flags} {COMMAND_BUFFERS_OFF}".strip()
    return [COMMAND_BUFFERS_OFF]


def main(argv: list[str]) -> None:
    """``argv`` = [options JSON, mode ('path' | 'module'), target, *script args]."""
    global S
    opts, mode, target, *args = argv
    opts = json.loads(opts)
    S = _State(opts["logdir"], opts.get("dump", True), opts.get("window"), opts.get("max_trace_bytes"))
    if S.window is None:  # before the script imports jax: XLA reads its flags once, when its backend comes up
        S.flags_added = whole_run_flags(os.environ)
    S.calibration_file = opts.get("calibration_file")
    if opts.get("python_tracer") is not None:
        S.python_tracer = bool(opts["python_tracer"])
    sys.argv[:] = [target, *args]
    sys.meta_path.insert(0, _Finder({"jax._src.xla_bridge": _hook_xla_bridge, "jax._src.compiler": _hook_compiler,
                                     "jax._src.profiler": _hook_annotations, "jax._src.monitoring": _hook_monitoring,
                                     "jax._src.pjit": _hook_pjit}))

    def on_term(signum, frame):
        raise _Terminated()

    signal.signal(signal.SIGTERM, on_term)
    if mode == "module":  # the module's own package is the user's code, even where it is installed
        with contextlib.suppress(ImportError, ValueError, AttributeError):
            spec = importlib.util.find_spec(target.split(".")[0])
            stepfn.USER_DIRS.extend(os.path.realpath(p) for p in (spec.submodule_search_locations or []))
    describe = {"script": os.path.abspath(target) if mode == "path" else None,
                "module": target if mode == "module" else None, "argv": list(args), "cwd": os.getcwd()}
    error: BaseException | None = None
    try:
        pyrun.run(mode, target)
        outcome = {"kind": "ok", "status": 0}
    except SystemExit as e:
        error = e
        code = e.code
        outcome = {"kind": "exit", "status": code if isinstance(code, int) else (0 if code is None else 1),
                   "message": None if code is None or isinstance(code, int) else str(code)}
    except KeyboardInterrupt as e:
        error = e
        outcome = {"kind": "interrupted", "status": 130}
    except _Terminated as e:
        error = e
        outcome = {"kind": "terminated", "status": -signal.SIGTERM}
    except BaseException as e:
        error = e
        outcome = {"kind": "exception", "status": 1, "message": f"{type(e).__name__}: {e}"}
    _finish(describe, outcome)
    if error is None:
        return
    if isinstance(error, SystemExit):
        raise error.with_traceback(None)
    if isinstance(error, _Terminated):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _flush()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        os._exit(128 + signal.SIGTERM)
    error.__traceback__ = _trim(error.__traceback__)
    sys.excepthook(type(error), error, error.__traceback__)
    raise SystemExit(130 if isinstance(error, KeyboardInterrupt) else 1)


def _flush() -> None:
    for s in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            s.flush()


BOOT = (
    "import importlib.util as u, sys\n"
    "s = u.spec_from_file_location('_rooflens_launch', {path!r})\n"
    "m = u.module_from_spec(s)\n"
    "sys.modules['_rooflens_launch'] = m\n"
    "s.loader.exec_module(m)\n"
    "del u, s, m\n"
    "sys.modules['_rooflens_launch'].main(sys.argv[1:])\n"
)


def command(logdir: str, mode: str, target: str, args: list[str], dump: bool = True,
            window: dict | None = None, calibration_file: str | None = None,
            max_trace_bytes: int | None = None, python_tracer: bool | None = None) -> list[str]:
    """The ``argv`` that runs ``target`` under rooflens in a fresh interpreter; ``window``:
    ``{"steps": [a, b]}`` or ``{"delay_s": d, "duration_s": t}`` (see :mod:`rooflens.capture.stepwindow`);
    ``calibration_file``: the chip ``local`` a CPU run records (read when the run ends); ``max_trace_bytes``: a
    whole run's trace is stopped early past it (:mod:`rooflens.capture.memwatch`); ``python_tracer``: JAX's Python
    tracer on or off (None: on for a window, off for a whole run)."""
    opts = json.dumps({"logdir": os.path.abspath(logdir), "dump": dump, "window": window,
                       "calibration_file": calibration_file, "max_trace_bytes": max_trace_bytes,
                       "python_tracer": python_tracer})
    return [sys.executable, "-c", BOOT.format(path=HERE), opts, mode, target, *args]
