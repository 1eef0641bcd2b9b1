"""The run manifest: ``rooflens.json``, what a capture records beside its trace.

Written by the trace window (``rl.capture``, ``Session``: versions, devices, the in-window
records, the steps and function) and by ``rooflens run``'s launcher (the script, its exit, the
trace's wall-clock span, every compilation with its span and memory, cache misses, transfers);
read by ``rooflens.trace.load`` into ``Profile.manifest``. ``Profile.metadata`` (and the report
JSON's ``metadata``) is ``manifest.to_dict()``: the same document, keys in the order they were read.

Reading is tolerant: a key this module does not know is kept in ``extra``; a known key whose value
has the wrong type is kept there too (so the document is unchanged) while its field stays at its
default, and ``problems`` says so in one sentence. Standard library only: the launcher runs in the
script's interpreter before JAX and loads this file by path.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

_META = ("extra", "order", "problems")

#: The jitted function every rooflens capture calls once on each local device right before it stops
#: the trace (``rooflens.capture.common.drain_devices``: a device runs its programs in order, so this
#: one finishing means everything dispatched before it has run). Its program (``jit_rooflens_drain``)
#: donates its one byte and runs no op: its dispatches are the capture's, never a program of the run.
DRAIN_FUNCTION = "rooflens_drain"


def _fits(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _plain(value: Any) -> Any:
    if isinstance(value, _Record):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class _Record:
    """Known keys as typed fields (None: absent), the rest in ``extra``, the order read in ``order``."""

    KINDS: ClassVar[dict[str, type]] = {}  # field → the JSON type it holds
    RECORDS: ClassVar[dict[str, type]] = {}  # field → the record type it holds (or a list of)

    @classmethod
    def of(cls, **values: Any):
        """A record written by a capture: known keys as fields, any other key kept in ``extra``."""
        known = {f.name for f in fields(cls)} - set(_META)
        return cls(**{k: v for k, v in values.items() if k in known},
                   extra={k: v for k, v in values.items() if k not in known})

    @classmethod
    def from_dict(cls, d: Any, where: str = "rooflens.json"):
        if not isinstance(d, dict):
            return cls(problems=[f"{where} is not an object ({type(d).__name__}); ignored"])
        known = {f.name for f in fields(cls)} - set(_META)
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        problems: list[str] = []
        for key, value in d.items():
            if key not in known:
                extra[key] = value
            elif value is None:
                values[key] = None
            elif key in cls.RECORDS:
                values[key] = cls._record(key, value, f"{where}: {key}", problems, extra)
            elif _fits(value, cls.KINDS[key]):
                values[key] = value
            else:
                extra[key] = value
                problems.append(f"{where}: {key} is {type(value).__name__}, not {cls.KINDS[key].__name__}; "
                                "ignored")
        values = {k: v for k, v in values.items() if k not in extra}
        return cls(**values, extra=extra, order=tuple(d), problems=problems)

    @classmethod
    def _record(cls, key: str, value: Any, where: str, problems: list[str], extra: dict) -> Any:
        kind = cls.RECORDS[key]
        if cls.KINDS.get(key) is list:
            if not isinstance(value, list):
                extra[key] = value
                problems.append(f"{where} is {type(value).__name__}, not a list; ignored")
                return None
            out = [kind.from_dict(v, f"{where}[{i}]") for i, v in enumerate(value)]
        elif not isinstance(value, dict):
            extra[key] = value
            problems.append(f"{where} is {type(value).__name__}, not an object; ignored")
            return None
        else:
            out = kind.from_dict(value, where)
        for r in out if isinstance(out, list) else [out]:
            problems.extend(r.problems)
        return out

    def to_dict(self) -> dict:
        """The document: the keys read, in their order, then any field set since and the extra keys."""
        names = [f.name for f in fields(self) if f.name not in _META]
        keys = list(self.order) + [k for k in names + list(self.extra) if k not in self.order]
        out = {}
        for k in keys:
            if k in self.extra:
                out[k] = self.extra[k]
            elif k in names and (getattr(self, k) is not None or k in self.order):
                out[k] = _plain(getattr(self, k))
        return out


@dataclass
class Compilation(_Record):
    """One XLA compilation a capture saw: the recorder's (duration, the user's line) or the launcher's
    (also its module, wall-clock span and compiled memory; for a recompilation, JAX's cache-miss
    explanation and the reason drawn from it)."""

    duration_s: float | None = None
    where: str | None = None  # the user's frame that triggered it
    module: str | None = None
    start_unix_s: float | None = None
    end_unix_s: float | None = None
    memory: dict | None = None  # the executable's compiled memory stats (…_in_bytes)
    explanation: str | None = None  # JAX's cache-miss text
    reason: str | None = None  # why it is a recompilation
    function: str | None = None  # the jitted function compiled (from JAX's explanation, else the module's name)
    defined_at: str | None = None  # "file:line" where that function is defined (JAX's explanation; "" unknown)
    nth: int | None = None  # its how-manieth compilation in the run (1: the first)
    in_trace: bool | None = None  # a recompilation: whether it overlaps the traced window (only those are counted)
    flops: float | None = None  # the compiled program's FLOPs per execution (XLA's cost analysis)
    bytes_accessed: float | None = None  # and its bytes accessed per execution
    extra: dict = field(default_factory=dict)
    order: tuple[str, ...] = ()
    problems: list[str] = field(default_factory=list)

    KINDS: ClassVar[dict[str, type]] = {"duration_s": float, "where": str, "module": str, "start_unix_s": float,
                                        "end_unix_s": float, "memory": dict, "explanation": str, "reason": str,
                                        "function": str, "defined_at": str, "nth": int, "in_trace": bool,
                                        "flops": float, "bytes_accessed": float}


@dataclass
class InWindowRecord(_Record):
    """What the capture recorded inside the window besides the trace."""

    compilations: list[Compilation] | None = None  # rooflens run: the recompilations inside the traced window
    first_compilations: list[Compilation] | None = None  # rooflens run: each function's first compilation
    recompilations_outside: list[Compilation] | None = None  # rooflens run: recompilations before/after the window
    cache_misses: list[str] | None = None
    all_cache_misses: list[dict] | None = None  # rooflens run: every miss with its time
    transfers: list[str] | None = None
    transfer_times_unix_s: list[float] | None = None
    compile_spans: list[dict] | None = None  # rooflens run: tracing/lowering/compile spans (wall clock)
    transfer_guard: str | None = None
    extra: dict = field(default_factory=dict)
    order: tuple[str, ...] = ()
    problems: list[str] = field(default_factory=list)

    KINDS: ClassVar[dict[str, type]] = {
        "compilations": list, "first_compilations": list, "recompilations_outside": list, "cache_misses": list,
        "all_cache_misses": list, "transfers": list, "transfer_times_unix_s": list, "compile_spans": list,
        "transfer_guard": str}
    RECORDS: ClassVar[dict[str, type]] = {"compilations": Compilation, "first_compilations": Compilation,
                                          "recompilations_outside": Compilation}

    @property
    def every_compilation(self) -> list[Compilation]:
        return list(self.first_compilations or []) + list(self.compilations or []) + \
            list(self.recompilations_outside or [])


@dataclass
class StepCandidate(_Record):
    """A jitted function the script's own code called (from one line) that was not taken as the step."""

    function: str | None = None
    program: str | None = None  # jit_<function>
    call_site: str | None = None  # "file:line (function)": the line it was first seen called from
    loop_depth: int | None = None  # loops of the script's own code around that call (None: source unread)
    calls_before_window: int | None = None  # its calls from that line before the window opened
    calls_at_choice: int | None = None  # … when the step function was taken (None: first called later)
    calls_in_run: int | None = None  # its calls in the whole run, from any line
    flops_per_call: float | None = None  # its compiled program's cost (XLA's cost analysis; None: unknown)
    bytes_per_call: float | None = None
    extra: dict = field(default_factory=dict)
    order: tuple[str, ...] = ()
    problems: list[str] = field(default_factory=list)

    KINDS: ClassVar[dict[str, type]] = {"function": str, "program": str, "call_site": str, "loop_depth": int,
                                        "calls_before_window": int, "calls_at_choice": int, "calls_in_run": int,
                                        "flops_per_call": float, "bytes_per_call": float}


@dataclass
class StepProgram(_Record):
    """Which jitted function a window of steps (``rooflens run --steps``) took as the step, and why:
    ``chosen_by`` "call site": of the jitted functions the script's own code had called when the window
    had to open, the one of the shallowest loop with the most work per call (compiled FLOPs and
    bytes); "--step-fn": the one the user named (also for a whole run); "StepTraceAnnotation": the
    script's annotated steps (then no function is named)."""

    chosen_by: str | None = None  # "call site" | "--step-fn" | "StepTraceAnnotation"
    function: str | None = None  # the jitted function's name
    program: str | None = None  # the program JAX compiles it to (jit_<function>)
    call_site: str | None = None  # "file:line (function)" of the script's line that calls it
    calls_before_window: int | None = None
    reason: str | None = None  # one sentence: why this function, the other candidates, what was not counted
    loop_depth: int | None = None  # loops of the script's own code around its call
    calls_in_run: int | None = None  # its calls in the whole run
    flops_per_call: float | None = None  # its compiled program's cost when taken (XLA's cost analysis)
    bytes_per_call: float | None = None
    candidates: list[StepCandidate] | None = None  # the other jitted functions, most called first
    choose_another: str | None = None  # the command line that takes another function
    extra: dict = field(default_factory=dict)
    order: tuple[str, ...] = ()
    problems: list[str] = field(default_factory=list)

    KINDS: ClassVar[dict[str, type]] = {"chosen_by": str, "function": str, "program": str, "call_site": str,
                                        "calls_before_window": int, "reason": str, "loop_depth": int,
                                        "calls_in_run": int, "flops_per_call": float, "bytes_per_call": float,
                                        "candidates": list, "choose_another": str}
    RECORDS: ClassVar[dict[str, type]] = {"candidates": StepCandidate}


@dataclass
class RunManifest(_Record):
    """``rooflens.json``."""

    captured_by: str | None = None  # "rooflens.capture", "rooflens.Session", "rooflens run"
    warmup_in_window: bool | None = None  # traced from its start (rooflens run): warm-up is in the trace
    script: str | None = None
    module: str | None = None
    argv: list | None = None
    cwd: str | None = None
    exit: dict | None = None
    when_unix_s: float | None = None
    wall_s: float | None = None
    trace_start_unix_ns: int | None = None
    trace_stop_unix_ns: int | None = None
    process_index: int | None = None
    process_count: int | None = None
    host_label: str | None = None
    python: str | None = None
    notes: list | None = None  # what the launcher noticed (the script started its own trace, …)
    jax_version: str | None = None
    jaxlib_version: str | None = None
    backend: str | None = None
    device_kind: str | None = None
    num_devices: int | None = None
    num_local_devices: int | None = None
    devices: list | None = None
    devices_error: str | None = None
    in_window: InWindowRecord | None = None
    steps: int | None = None  # rl.capture / Session: steps traced
    warmup: int | None = None
    programs: list | None = None
    args: list | None = None
    function: str | None = None
    memory: dict | None = None  # program → compiled memory stats
    step_program: StepProgram | None = None  # rooflens run --steps: the function taken as the step, and why
    drained_s: float | None = None  # how long the capture waited for the devices to finish before it stopped
    calibration: dict | None = None  # a CPU's calibration when it ran: {"path", "toml"} (the chip 'local' file)
    extra: dict = field(default_factory=dict)
    order: tuple[str, ...] = ()
    problems: list[str] = field(default_factory=list)  # what could not be read (not written back)

    KINDS: ClassVar[dict[str, type]] = {
        "captured_by": str, "warmup_in_window": bool, "script": str, "module": str, "argv": list, "cwd": str,
        "exit": dict, "when_unix_s": float, "wall_s": float, "trace_start_unix_ns": int, "trace_stop_unix_ns": int,
        "process_index": int, "process_count": int, "host_label": str, "python": str, "notes": list,
        "jax_version": str, "jaxlib_version": str, "backend": str, "device_kind": str, "num_devices": int,
        "num_local_devices": int, "devices": list, "devices_error": str, "in_window": dict, "steps": int,
        "warmup": int, "programs": list, "args": list, "function": str, "memory": dict, "step_program": dict,
        "drained_s": float, "calibration": dict}
    RECORDS: ClassVar[dict[str, type]] = {"in_window": InWindowRecord, "step_program": StepProgram}

    @property
    def window(self) -> InWindowRecord:
        """The in-window records (empty when the capture wrote none)."""
        return self.in_window if self.in_window is not None else InWindowRecord()


def calibration_record(path: str | None) -> dict | None:
    """The calibration file a CPU run is priced against (the chip ``local``), as the run records it:
    ``{"path", "toml"}`` (its text, read back by ``rooflens.hardware.read_catalog_text``), or None when
    there is none."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return {"path": path, "toml": fh.read()}
    except (OSError, UnicodeDecodeError):
        return None
