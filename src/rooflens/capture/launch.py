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
import re
import signal
import socket
import sys
import threading
import time

HERE = os.path.abspath(__file__)


def _sibling(name: str, package: str = ""):
    """A stdlib-only module beside this file (or in the sibling ``package``): imported normally inside
    rooflens, loaded by path in the launched interpreter (where importing the rooflens package would
    import numpy and JAX)."""
    if __package__:
        return importlib.import_module(f"{__package__.rsplit('.', 1)[0]}.{package}.{name}" if package
                                       else f"{__package__}.{name}")
    key = f"_rooflens_{package}_{name}" if package else f"_rooflens_{name}"
    if key not in sys.modules:
        folder = os.path.dirname(HERE)
        path = os.path.join(os.path.dirname(folder), package, f"{name}.py") if package else \
            os.path.join(folder, f"{name}.py")
        spec = importlib.util.spec_from_file_location(key, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


common = _sibling("common")
manifest = _sibling("manifest", "trace")
KV_KEY = "rooflens/run_name"
KV_TIMEOUT_MS = 20_000
_LOG_PREFIX = re.compile(rb"^[IWEF]\d{4} ")
_LOG_TIME = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) ")
_COMPILE_SPANS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")


class _Terminated(BaseException):
    """SIGTERM, turned into an exception so that the profile is written before the process dies."""


class _State:
    def __init__(self, logdir: str, dump: bool) -> None:
        self.logdir = logdir
        self.dump = dump
        self.tmp = ""  # where jax writes the trace before it is moved into the run directory
        self.dump_dir = ""
        self.run_name = ""
        self.label = socket.gethostname() or "host"
        self.process_index, self.process_count = 0, 1
        self.tracing = False
        self.starting = False
        self.saved_dir = ""  # set once the trace is written
        self.t0_unix_ns = 0
        self.t1_unix_ns = 0
        self.compiles: list[dict] = []
        self.spans: list[dict] = []
        self.misses: list[dict] = []
        self.transfers: list[str] = []
        self.transfer_times: list[float] = []
        self.explain_ours = False
        self.tap: _StderrTap | None = None
        self.warnings: list[str] = []
        self.snapshot: bytes = b""
        self.notes: list[str] = []


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
        if S is not None and not S.tracing and not S.starting and not S.saved_dir:
            _start_trace()
        return result

    backends.__wrapped__ = original
    backends.__doc__ = original.__doc__
    xb.backends = backends


def _hook_compiler(compiler) -> None:
    original = compiler.backend_compile_and_load

    def backend_compile_and_load(*args, **kwargs):
        options = kwargs.get("options", args[3] if len(args) > 3 else None)
        module = kwargs.get("module", args[1] if len(args) > 1 else None)
        if S is not None and S.tracing and S.dump_dir and options is not None:
            try:
                debug = options.executable_build_options.debug_options
                if not debug.xla_dump_to and "xla_dump_to" not in os.environ.get("XLA_FLAGS", ""):
                    debug.xla_dump_to = S.dump_dir
            except Exception:  # noqa: S110 (an older/newer options object: no dumps, nothing else changes)
                pass
        t0 = time.time()
        executable = original(*args, **kwargs)
        t1 = time.time()
        if S is not None and S.tracing:
            rec = {"module": _module_name(module, executable), "start_unix_s": t0, "end_unix_s": t1,
                   "duration_s": t1 - t0, "where": common.user_frame(skip=(HERE,))}
            try:
                ms = executable.get_compiled_memory_stats()
                rec["memory"] = {k: int(getattr(ms, k)) for k in dir(ms)
                                 if k.endswith("_in_bytes") and isinstance(getattr(ms, k), int)}
            except Exception:  # noqa: S110 (a backend without memory stats)
                pass
            S.compiles.append(rec)
        return executable

    backend_compile_and_load.__wrapped__ = original
    compiler.backend_compile_and_load = backend_compile_and_load


def _hook_profiler(profiler) -> None:
    original = profiler.start_trace

    def start_trace(*args, **kwargs):
        if S is not None and S.tracing and not S.starting:
            S.notes.append("the script started its own profiler trace; rooflens's trace ends there")
            _stop_trace()
        return original(*args, **kwargs)

    start_trace.__wrapped__ = original
    start_trace.__doc__ = original.__doc__
    profiler.start_trace = start_trace


def _hook_monitoring(monitoring) -> None:
    def on_span(event, start, end, **kw):
        if S is not None and S.tracing and event in _COMPILE_SPANS:
            S.spans.append({"event": event.rsplit("/", 1)[-1], "fun_name": str(kw.get("fun_name", "")),
                            "start_unix_s": float(start), "end_unix_s": float(end)})

    if hasattr(monitoring, "register_event_time_span_listener"):
        monitoring.register_event_time_span_listener(on_span)


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


def _start_trace() -> None:
    S.starting = True
    try:
        import tempfile

        import jax
        from jax._src import distributed
        from jax._src import profiler as jprof

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
            S.tap = _StderrTap()
            for g in guards:
                cfg.update(g, "log")
        S.t0_unix_ns = time.time_ns()
        jprof.start_trace(S.tmp)
        S.tracing = True
    except Exception as e:
        _say(f"could not start the profiler ({type(e).__name__}: {e}); the script runs unprofiled")
    finally:
        S.starting = False


def _stop_trace() -> None:
    """Stop the trace and move it into the run directory (once; safe to call at any time)."""
    if S is None or not S.tracing:
        return
    S.tracing = False
    import shutil

    from jax._src import profiler as jprof

    with contextlib.suppress(Exception):
        S.snapshot = jprof.device_memory_profile()
    try:
        jprof.stop_trace()
    except Exception as e:
        _say(f"the profiler failed to write its trace ({type(e).__name__}: {e})")
    S.t1_unix_ns = time.time_ns()
    run_dir = os.path.join(S.logdir, "plugins", "profile", S.run_name)
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


# ---- stderr: transfer-guard lines out, everything else through, as it comes ---------------------


def _logged_at(line: str, read_s: float) -> float:
    """When a C++ log line was written (its own local-time stamp, to the µs), or when it was read.

    The pipe is read in bursts (and late on a loaded machine), so a burst of lines would share
    one reading time; the stamp is used when it is within a minute of that time."""
    m = _LOG_TIME.match(line)
    if not m:
        return read_s
    month, day, hour, minute, second, us = map(int, m.groups())
    try:
        at = time.mktime((time.localtime(read_s).tm_year, month, day, hour, minute, second, 0, 0, -1)) + us * 1e-6
    except (OverflowError, ValueError):
        return read_s
    return at if abs(at - read_s) < 60 else read_s


class _StderrTap:
    def __init__(self) -> None:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        self.saved = os.dup(2)
        r, w = os.pipe()
        os.dup2(w, 2)
        os.close(w)
        self.r = r
        self.pending = b""
        self.thread = threading.Thread(target=self._pump, name="rooflens-stderr", daemon=True)
        self.thread.start()

    def _emit(self, data: bytes) -> None:
        while data:
            try:
                n = os.write(self.saved, data)
            except InterruptedError:
                continue
            except OSError:
                return
            data = data[n:]

    def _take(self, final: bool = False) -> None:
        lines = self.pending.split(b"\n")
        self.pending = lines.pop()
        out = []
        for raw in lines:
            line = common.transfer_line(raw.decode("utf-8", "replace"))
            if line and S is not None:
                S.transfers.append(line)
                S.transfer_times.append(_logged_at(raw.decode("utf-8", "replace"), time.time()))
            else:
                out.append(raw + b"\n")
        # a partial line is passed on at once (progress bars redraw with \r), unless it may be a
        # C++ log line still being written
        if self.pending and (final or not _LOG_PREFIX.match(self.pending)):
            out.append(self.pending)
            self.pending = b""
        if out:
            self._emit(b"".join(out))

    def _pump(self) -> None:
        while True:
            try:
                chunk = os.read(self.r, 65536)
            except InterruptedError:
                continue
            except OSError:
                break
            if not chunk:
                break
            self.pending += chunk
            self._take()
        self._take(final=True)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(self.saved, 2)  # the pipe's last writer (in this process) goes: the pump sees EOF
        self.thread.join(timeout=2.0)
        if self.thread.is_alive():  # a child process still holds the pipe: leave the pump to it
            return
        os.close(self.r)
        os.close(self.saved)


# ---- after the script: what else a capture saves -------------------------------------------------


def _classify_compiles(compiles: list[dict], misses: list[dict]) -> tuple[list[dict], list[dict]]:
    """(first compilations, recompilations). A compilation is a recompilation when JAX explains
    its cache miss by an earlier key of the same function, or when the same definition site was
    compiled twice before as a 'never seen' function (a fresh jit/lambda each time)."""
    first, again = [], []
    miss_i = 0
    sites: dict[str, int] = {}
    for c in compiles:
        reason = ""
        text = ""
        while miss_i < len(misses) and misses[miss_i]["t_unix_s"] <= c["start_unix_s"] + 1e-3:
            text = misses[miss_i]["text"]
            miss_i += 1
        if text:
            lines = [ln.strip() for ln in text.splitlines()]
            site = next((ln.split(" defined at ", 1)[1] for ln in lines if " defined at " in ln), "")
            if "never seen function" in text:
                sites[site] = sites.get(site, 0) + 1
                if site and sites[site] >= 3:
                    reason = (f"a new function object for the code at {site} (jax.jit or a lambda created again), "
                              f"compiled {sites[site]} times")
            else:  # the last line says what differs: "* at x, now f32[16] and before f32[8]"
                reason = next((ln.lstrip("* ") for ln in reversed(lines) if ln), "a cache miss")
        c = {**c, "explanation": text}
        if reason:
            again.append({**c, "reason": reason})
        else:
            first.append(c)
    return first, again


def _dump_files(dump_dir: str) -> dict[str, dict[str, str]]:
    """Module file stem (``module_0012.jit_step``) → {kind: path} for what a capture keeps."""
    out: dict[str, dict[str, str]] = {}
    if not dump_dir or not os.path.isdir(dump_dir):
        return out
    kinds = {"-buffer-assignment.txt": "buffer-assignment", "-live-range.txt": "live-range",
             "-memory-usage-report.txt": "memory-usage-report", "after_optimizations.txt": "hlo"}
    for f in sorted(os.listdir(dump_dir)):
        m = re.match(r"^(module_\d+\.[^.]+)\..*?(after_optimizations(?:-buffer-assignment|-live-range|"
                     r"-memory-usage-report)?\.txt)$", f)
        if not m:
            continue
        for suffix, kind in kinds.items():
            if m.group(2).endswith(suffix) and (kind != "hlo" or m.group(2) == "after_optimizations.txt"):
                out.setdefault(m.group(1), {})[kind] = os.path.join(dump_dir, f)
    return out


def _save_artifacts(meta) -> None:
    """rooflens.json, hlo/ and memory/ in the run directory (process 0's, in a job)."""
    import shutil

    run_dir = S.saved_dir
    memory: dict[str, dict] = {}
    files = _dump_files(S.dump_dir)
    user_dump = re.search(r"--xla_dump_to=(\S+)", os.environ.get("XLA_FLAGS", ""))
    if not files and user_dump:
        files = _dump_files(user_dump.group(1))
    mem_dir = os.path.join(run_dir, "memory")
    hlo_dir = os.path.join(run_dir, "hlo")
    owner = S.process_index == 0
    if owner:
        os.makedirs(mem_dir, exist_ok=True)
        os.makedirs(hlo_dir, exist_ok=True)
    by_name: dict[str, list[str]] = {}
    for stem in files:
        by_name.setdefault(stem.split(".", 1)[1], []).append(stem)
    stats_by_name: dict[str, list[dict]] = {}
    for c in S.compiles:
        if c.get("memory"):
            stats_by_name.setdefault(c["module"], []).append(c["memory"])
    for name, stems in by_name.items():
        stems.sort()
        # the program of this name with the largest compiled footprint stands for it
        stats = stats_by_name.get(name, [])
        pick = max(range(len(stems)), key=lambda i: _footprint(stats[i]) if i < len(stats) else -1)
        if owner:
            for kind, path in files[stems[pick]].items():
                if kind == "hlo":
                    for stem in stems:
                        if "hlo" in files[stem]:
                            shutil.copyfile(files[stem]["hlo"], os.path.join(hlo_dir, f"{stem}.txt"))
                else:
                    shutil.copyfile(path, os.path.join(mem_dir, f"{name}.{kind}.txt"))
        memory[name] = stats[pick] if pick < len(stats) else {}
    for name, stats in stats_by_name.items():  # compiled, but no dump (the script's own dump flags, …)
        memory.setdefault(name, max(stats, key=_footprint))
    meta.memory = memory
    if S.snapshot and owner:
        with open(os.path.join(mem_dir, "end.pb.gz"), "wb") as fh:
            fh.write(S.snapshot)
    name = "rooflens.json" if owner else f"{S.label}.rooflens.json"
    tmp = os.path.join(run_dir, f".{name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        json.dump(meta.to_dict(), fh, indent=1, default=str)
    os.replace(tmp, os.path.join(run_dir, name))
    if S.dump_dir:
        shutil.rmtree(S.dump_dir, ignore_errors=True)


def _footprint(stats: dict) -> int:
    return sum(v for k, v in stats.items() if not k.startswith("host_") and "generated_code" not in k)


def _finish(target: dict, outcome: dict) -> None:
    """Stop the trace, write everything, say where. Never raises."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        _stop_trace()
        transfers_open = S.tap is not None
        if transfers_open:
            S.tap.close()
            S.tap = None
        if not S.saved_dir:
            if S.run_name:
                _say("the profiler wrote no trace.")
            else:
                _say("the script started no JAX backend, so there is nothing to profile.")
            _cleanup_empty()
            return
        first, again = _classify_compiles(S.compiles, S.misses)
        meta = manifest.RunManifest.of(
            captured_by="rooflens run", warmup_in_window=True, **target,
            exit=outcome, when_unix_s=S.t0_unix_ns / 1e9, wall_s=(S.t1_unix_ns - S.t0_unix_ns) / 1e9,
            trace_start_unix_ns=S.t0_unix_ns, trace_stop_unix_ns=S.t1_unix_ns,
            process_index=S.process_index, process_count=S.process_count, host_label=S.label,
            python=sys.version.split()[0], notes=S.notes,
            in_window=manifest.InWindowRecord(
                compilations=[manifest.Compilation.from_dict(c) for c in again],
                first_compilations=[manifest.Compilation.from_dict(c) for c in first],
                cache_misses=[m["text"] for m in S.misses if m in _explained(again)],
                all_cache_misses=S.misses, transfers=S.transfers, transfer_times_unix_s=S.transfer_times,
                compile_spans=S.spans,
                transfer_guard="log" if transfers_open else "the script's own (transfers not counted)"),
        )
        try:
            import jax

            devices = jax.devices()
            meta.jax_version, meta.backend = jax.__version__, jax.default_backend()
            meta.device_kind, meta.num_devices = devices[0].device_kind, len(devices)
            meta.num_local_devices = jax.local_device_count()
            meta.devices = [{"id": d.id, "kind": d.device_kind, "platform": d.platform,
                             "process_index": d.process_index} for d in devices]
        except Exception as e:
            meta.devices_error = f"{type(e).__name__}: {e}"
        _save_artifacts(meta)
        _say(f"profile written to {S.saved_dir}; read it with: rooflens report {S.saved_dir}")
    except Exception as e:
        _say(f"writing the profile failed ({type(e).__name__}: {e})")
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)


def _explained(again: list[dict]) -> list[dict]:
    texts = {c.get("explanation") for c in again}
    return [m for m in (S.misses if S else []) if m["text"] in texts]


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
        if f != HERE and not f.endswith(("runpy.py", "<frozen runpy>")) and f != "<string>":
            break
        tb = tb.tb_next
    return tb


def _run(mode: str, target: str) -> None:
    import builtins
    import runpy

    main = sys.modules["__main__"]
    if mode == "module":
        sys.path[0] = os.getcwd()
        sys.argv[0] = "-m"
        main.__dict__.clear()
        main.__dict__.update({"__name__": "__main__", "__builtins__": builtins})
        runpy._run_module_as_main(target, alter_argv=True)
        return
    path = os.path.abspath(target)
    if os.path.isdir(path) or not path.endswith((".py", ".pyw")) and _is_zip(path):
        del sys.path[0]
        runpy.run_path(target, run_name="__main__")
        return
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    import importlib.machinery as m

    with open(path, "rb") as fh:
        source = fh.read()
    code = compile(source, path, "exec", dont_inherit=True)
    g = main.__dict__
    g.clear()
    g.update({"__name__": "__main__", "__doc__": None, "__package__": None, "__spec__": None,
              "__loader__": m.SourceFileLoader("__main__", path), "__file__": path, "__cached__": None,
              "__builtins__": builtins, "__annotations__": {}})
    exec(code, g)


def _is_zip(path: str) -> bool:
    import zipfile

    return os.path.isfile(path) and zipfile.is_zipfile(path)


def main(argv: list[str]) -> None:
    """``argv`` = [options JSON, mode ('path' | 'module'), target, *script args]."""
    global S
    opts, mode, target, *args = argv
    opts = json.loads(opts)
    S = _State(opts["logdir"], opts.get("dump", True))
    sys.argv[:] = [target, *args]
    sys.meta_path.insert(0, _Finder({"jax._src.xla_bridge": _hook_xla_bridge, "jax._src.compiler": _hook_compiler,
                                     "jax._src.profiler": _hook_profiler, "jax._src.monitoring": _hook_monitoring}))

    def on_term(signum, frame):
        raise _Terminated()

    signal.signal(signal.SIGTERM, on_term)
    describe = {"script": os.path.abspath(target) if mode == "path" else None,
                "module": target if mode == "module" else None, "argv": list(args), "cwd": os.getcwd()}
    error: BaseException | None = None
    try:
        _run(mode, target)
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


def command(logdir: str, mode: str, target: str, args: list[str], dump: bool = True) -> list[str]:
    """The ``argv`` that runs ``target`` under rooflens in a fresh interpreter."""
    opts = json.dumps({"logdir": os.path.abspath(logdir), "dump": dump})
    return [sys.executable, "-c", BOOT.format(path=HERE), opts, mode, target, *args]
