"""``rl.load``: a logdir, a run directory or one trace file → a :class:`Profile`.

A run directory is what ``jax.profiler`` writes (``<logdir>/plugins/profile/<run>/``): one
``<host>.xplane.pb`` per host (and usually a ``<host>.trace.json.gz``). ``rl.capture`` adds
``rooflens.json`` (what was captured) and ``hlo/<program>.txt`` (the compiled HLO of every
program that ran), which give each op its category and named scope.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import re
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rooflens import hlo as H
from rooflens.errors import RooflensError
from rooflens.hlo.opcodes import KNOWN_OPCODES, opcode_category
from rooflens.hlo.shape import HOST_MEMORY_SPACE
from rooflens.trace import discover, formats, fs
from rooflens.trace.events import EventTable, concat
from rooflens.trace.formats.raw import RawTrace, assign_steps
from rooflens.trace.manifest import RunManifest
from rooflens.trace.progress import ingest_progress

if TYPE_CHECKING:
    from rooflens.trace.reduce import Reduced

XSPACE = formats.by_name("xspace").suffixes[0]


@dataclass
class OpInfo:
    category: str
    named_scope: str
    opcode: str


@dataclass
class Profile:
    """A measured run: device op events, steps, and the HLO of its programs."""

    path: str
    table: EventTable
    steps: list[tuple[int, float, float]]  # (step number, start ns, end ns)
    platform: str  # tpu | gpu | cpu | unknown
    device_kind: str
    hosts: list[str]
    sources: list[str]  # the files read
    notes: list[str] = field(default_factory=list)  # what this trace cannot give, said plainly
    metadata: dict = field(default_factory=dict)  # rooflens.json, when captured by rooflens
    hlo_texts: dict[str, str] = field(default_factory=dict)  # program → HLO module text
    plane_stats: dict = field(default_factory=dict)
    host_events: list[tuple[str, float, float]] = field(default_factory=list)  # Python frames: name, start, end
    host_events_of: dict[str, list[tuple[str, float, float]]] = field(default_factory=dict)  # the same, per host
    events_total: int = 0  # every event of the files read, kept or not
    manifest: RunManifest = field(default_factory=RunManifest)  # rooflens.json, typed (metadata is its document)
    # a pod merged from its hosts' aggregates (rooflens.trace.reduce.Reduced): the op stats and idle units its
    # workers measured, every op it ran; ``table`` then holds one sampled step's events per host
    reduced: Reduced | None = None
    # per host: each jitted function's dispatches (ns of table time), and where its trace ends (ns)
    dispatches_of: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    end_ns_of: dict[str, float] = field(default_factory=dict)
    unran: tuple = ()  # rooflens.trace.dispatch.Unran: programs dispatched more often than they ran in the trace

    @cached_property
    def modules(self) -> dict[str, H.Module]:
        out = {}
        for name, text in self.hlo_texts.items():
            try:
                out[name] = H.parse(text)
            except H.HloParseError:
                self.notes.append(f"the HLO saved for {name} could not be read; its ops have no scope or category")
        return out

    def module_for(self, program: str) -> H.Module | None:
        """The HLO of ``program`` (``jit_dot(49)``), or of its name when only that is known."""
        return self.modules.get(program) or self.modules.get(re.sub(r"\(\d+\)$", "", program))

    @cached_property
    def op_info(self) -> dict[tuple[str, str], OpInfo]:
        """(program, op) → category and named scope, from the programs' HLO where known. Made once even
        when threads ask together (the analysis parses the HLO on a thread of its own; from Python 3.12
        ``cached_property`` no longer serializes them)."""
        with _OP_INFO_LOCK:
            done = self.__dict__.get("op_info")
            if done is not None:  # made by another thread while this one waited
                return done
            t = self.table
            out: dict[tuple[str, str], OpInfo] = {}
            pairs = ([(t.programs[p], t.names[n]) for p, n in t.pairs().tolist()] if self.reduced is None
                     else self.reduced.ops)
            for program, name in pairs:
                out[(program, name)] = _op_info(self.module_for(program), name, t.hlo_text.get((program, name)),
                                                t.op_meta.get((program, name), {}))
            self.__dict__["op_info"] = out
            return out


_OP_INFO_LOCK = threading.Lock()


def _from_trace_category(hlo_category: str) -> str:
    """TensorBoard's ``hlo_category`` (TPU traces) → rooflens's categories."""
    c = hlo_category.lower()
    if "convolution" in c:
        return "convolution"
    if "fusion" in c:
        return "fusion"
    if c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute") or "collective" in c:
        return "collective"
    if "data formatting" in c or c in ("copy", "transpose"):
        return "copy/transpose"
    return opcode_category(c) if c in KNOWN_OPCODES else ""


def _touches_host(module: H.Module | None, ins: H.Instruction) -> bool:
    shapes = list(ins.shape.leaves())
    if module is not None:
        for op in ins.operands:
            s = module.operand_shape(op)
            if s is not None:
                shapes += s.leaves()
    return any(s.is_array and s.memory_space == HOST_MEMORY_SPACE for s in shapes)


def _op_info(module: H.Module | None, name: str, text: str | None, meta: dict | None = None) -> OpInfo:
    ins = module.find(name) if module is not None else None
    if ins is None and text and "(" in text:
        try:
            ins = H.parse_instruction(text.strip())
        except (H.HloParseError, ValueError):
            ins = None
    if ins is not None:
        category = ins.category or opcode_category(ins.opcode, ins.custom_call_target)
        if ins.opcode == "fusion" and module is not None:
            body = {i.category for i in module.fusion_body(ins)}
            for c in ("matmul", "convolution", "collective"):
                if c in body:
                    category = c
                    break
        scope = ins.named_scope
        if meta:  # TPU traces carry XLA's own category and the op_name (tf_op) on every event
            category = _from_trace_category(meta.get("hlo_category", "")) or category
            scope = scope or H.named_scope_of(meta.get("op_name", "").rstrip(":"))
        if ins.opcode in ("copy-start", "copy-done", "copy") and _touches_host(module, ins):
            category = "host transfer"  # host offload (S(5)): a PCIe transfer, not a retiling copy
        return OpInfo(category, scope, ins.opcode)
    category, scope, opcode = _guess_from_name(name)
    if meta:  # a trace that says what an op without HLO is (Nsight: a transfer's kind, the NVTX ranges around it)
        category, scope = meta.get("category") or category, meta.get("scope") or scope
    return OpInfo(category, scope, opcode)


def _guess_from_name(name: str) -> tuple[str, str, str]:
    """(category, scope, opcode) from an op name alone: XLA names ops after their opcode
    (``all-reduce.4``, ``copy.3``), fusions after what they fuse (``input_transpose_fusion``)."""
    base = name.split(".")[0]
    if base in KNOWN_OPCODES:
        return opcode_category(base), "", base
    tokens = re.split(r"[_\-]", base)
    if "fusion" in tokens:
        return "fusion", "", "fusion"
    low = base.lower()
    if low.startswith("nccl"):  # NCCL's kernels (ncclDevKernel_AllReduce_…, ncclKernel_SendRecv…): communication
        return "collective", "", "custom-call"
    # CUDA kernel names: nvjet_… are cuBLAS's GEMMs; flash_fwd_kernel / fmha_… fused attention, which XLA runs as a
    # custom call (cuDNN)
    for key, cat in (("gemm", "matmul"), ("cublas", "matmul"), ("nvjet", "matmul"), ("conv", "convolution"),
                     ("elementwise", "elementwise"), ("flash", "custom-call"), ("fmha", "custom-call")):
        if key in low:
            return cat, "", "custom-call"
    for tok in reversed(tokens):
        if tok in KNOWN_OPCODES:
            return opcode_category(tok), "", tok
    return "unknown", "", base


def read_hlo_dir(directory: str | Path) -> dict[str, str]:
    """Program name → HLO text, from a directory of HLO text files (an XLA dump, or ``hlo/``).

    The program name is the module's own (``HloModule jit_step``); of a dump's several files
    for one module, the one after optimizations (what ran) is kept.
    """
    out: dict[str, tuple[int, str]] = {}
    d = Path(directory)
    if not d.is_dir():
        raise RooflensError(f"{directory} is not a directory of HLO files.")
    for f in sorted(d.glob("*.txt")):
        if "buffer-assignment" in f.name or "memory-usage" in f.name:
            continue
        try:
            text = f.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        m = re.match(r"\s*HloModule\s+([^\s,]+)", text)
        if not m:
            continue
        rank = 2 if "after_optimizations" in f.name or f.parent.name == "hlo" else 1
        if rank >= out.get(m.group(1), (0, ""))[0]:
            out[m.group(1)] = (rank, text)
    return {k: v for k, (_, v) in out.items()}


def _embedded_hlo(raws: list[RawTrace], files: list[str], table: EventTable, skip: set[str] = frozenset()
                  ) -> dict[str, str]:
    """Program → HLO text from the XSpaces' metadata plane (decoded with the events; for a Chrome
    trace, from its sibling XSpace), printed by jaxlib once per distinct module (the hosts of one
    job all carry the same programs).

    A program name compiled several times (``jit_dot(5)``, ``jit_dot(21)``) keeps the module whose
    instruction names cover most of the ops the trace ran under that name.
    """
    from rooflens.trace.formats.xspace.hlo_protos import hlo_protos, print_modules

    seen: dict[str, set[str]] = {}
    for p, n in table.pairs().tolist():
        seen.setdefault(table.programs[p], set()).add(table.names[n])
    exact = {raw: shown for shown, raw in table.program_keys.items()}
    wanted: dict[str, bytes] = {}
    for raw, f in zip(raws, files):
        protos = raw.hlo_protos
        if not protos and not f.endswith(XSPACE) and not fs.is_url(f):
            xspace = Path(f).with_name(discover.host_of(Path(f).name) + XSPACE)
            if xspace.is_file():
                try:
                    with xspace.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                        protos = hlo_protos(mm)
                except (ValueError, IndexError, OSError):
                    protos = {}  # a damaged metadata plane: the ops just lack scopes
        for k, v in protos.items():
            base = re.sub(r"\(\d+\)$", "", k)
            if base in skip:
                continue  # its text is saved beside the trace: no need to print it
            if k not in wanted and (k in seen or k in exact or base in seen):
                wanted[k] = v
    best: dict[str, tuple[int, str]] = {}
    for key, text in print_modules(wanted).items():
        if key in seen or key in exact:  # the trace names this very program (name and id)
            best[exact.get(key, key)] = (1 << 30, text)
            continue
        name = re.sub(r"\(\d+\)$", "", key)
        ops = seen.get(name)
        if not ops:
            continue
        defined = set(_DEFINED.findall(text))
        score = sum(1 for op in ops if op in defined)
        if name not in table.program_keys and score > best.get(name, (-1, ""))[0]:
            best[name] = (score, text)
    return {k: v for k, (_, v) in best.items()}


_DEFINED = re.compile(r"(?:^|\s)%?([^\s=%]+) = ", re.M)  # the instruction names a module's text defines


def job_steps(steps_by_host: list[list[tuple[int, float, float]]]) -> list[tuple[int, float, float]]:
    """The job's steps: one per step number, from the first host's start to the last host's end (hosts
    share one time axis; a step of a multi-host job is over when its slowest host is done, and the next begins
    no earlier: hosts whose steps follow each other without a gap start the next one at slightly different
    times, and the job's steps would overlap by that)."""
    if len(steps_by_host) == 1:
        return steps_by_host[0]
    merged: dict[int, tuple[float, float]] = {}
    for host_steps in steps_by_host:
        for n, s, e in host_steps:
            a, b = merged.get(n, (s, e))
            merged[n] = (min(a, s), max(b, e))
    steps = sorted((n, s, e) for n, (s, e) in merged.items())
    for k in range(1, len(steps)):
        (m, a, b), (n, s, e) = steps[k - 1], steps[k]
        if s < b:  # the boundary: the slowest host's end of the step before, never past this step's end
            cut = max(min(b, e), a)
            steps[k - 1], steps[k] = (m, a, cut), (n, cut, max(e, cut))
    return steps


def _has_saved_hlo(run: str) -> bool:
    return not fs.is_url(run) and (Path(run) / "hlo").is_dir()


def _import_hlo_printer() -> None:
    """jaxlib's HLO printer (half a second or so), loaded while the traces are read."""
    from rooflens.trace.formats.xspace.hlo_protos import hlo_printer

    with contextlib.suppress(Exception):  # printing will say what went wrong, on the main thread
        hlo_printer()


MERGES = ("auto", "events", "aggregates")
#: a pod whose host files hold more than this reads as per-host aggregates under ``merge="auto"``: holding
#: every op event costs the driver about 1.2 bytes of memory per byte of trace (docs/pod-scale.md)
AGGREGATE_ABOVE_BYTES = 1 << 30


def load(path: str | Path | list[str | Path], hlo_dir: str | Path | None = None, progress: bool | None = None,
         workers: int | None = 1, engine: str = "local", ray_address: str | None = None, merge: str = "auto",
         include_warmup: bool = False) -> Profile:
    """Read a profile: one or several logdirs, run directories or trace files (``*.xplane.pb``,
    ``*.trace.json.gz``), local or fsspec URLs (``gs://…``); every host of the run.

    Each host file is read on its own (``workers`` processes, or Ray tasks with ``engine="ray"``;
    see :mod:`rooflens.trace.hosts`), then the hosts are merged on one time axis. ``hlo_dir`` adds
    the HLO of the programs (an XLA dump directory) when the run has none. ``progress``: a bar on
    stderr for reads longer than about a second (default: when stderr is a terminal).

    ``merge``: ``"events"`` keeps every host's op events in this process (exact, memory grows with the
    pod); ``"aggregates"`` has each worker reduce its host to op sums, counts, extremes, a quantile
    sketch, device times, steps and one sampled step's events (:mod:`rooflens.trace.reduce`: memory flat
    in the number of hosts, medians to within 1%); ``"auto"``: aggregates for several hosts whose files
    hold over 1 GiB. ``include_warmup``: keep a ``rooflens run`` profile's warm-up (first runs) in.
    """
    if merge not in MERGES:
        raise RooflensError(f"unknown merge {merge!r}: use one of {', '.join(MERGES)}.")
    paths = [str(p) for p in path] if isinstance(path, list | tuple) else [str(path)]
    if not paths:
        raise RooflensError("no profile given.")
    runs, host_files = discover.find(paths)
    if merge == "auto":
        merge = "aggregates" if len(host_files) > 1 and _bytes_of(host_files) > AGGREGATE_ABOVE_BYTES else "events"
    if merge == "aggregates":
        from rooflens.trace.reduce import load_aggregated

        return load_aggregated(paths, runs, host_files, hlo_dir, progress, workers, engine, ray_address,
                               include_warmup)
    from rooflens.trace.hosts import read_hosts

    files = [f.path for f in host_files]
    with ingest_progress([Path(f) for f in files], progress) as bar:
        raws = read_hosts(host_files, workers=workers, engine=engine, ray_address=ray_address,
                          progress=bar.for_file,
                          meanwhile=None if any(_has_saved_hlo(r) for r in runs) else _import_hlo_printer)
    profile = assemble(paths, runs, raws, files, hlo_dir)
    if include_warmup:
        from rooflens.trace.warmup import with_warmup

        profile = with_warmup(profile)
    return profile


def _bytes_of(files) -> int:
    """The host files' size in bytes (those in a bucket, or an extracted archive, count for nothing)."""
    total = 0
    for f in files:
        with contextlib.suppress(OSError):
            if not fs.is_url(f.path) and Path(f.path).is_file():
                total += Path(f.path).stat().st_size
    return total


def run_manifest(runs: list[str], notes: list[str]) -> RunManifest:
    """The first run's ``rooflens.json``, typed (its problems added to ``notes``); empty when none has one."""
    for run in runs:
        text = fs.read_text(fs.join(run, "rooflens.json"))
        if text is None:
            continue
        try:
            manifest = RunManifest.from_dict(json.loads(text), fs.join(run, "rooflens.json"))
            notes.extend(manifest.problems)
            return manifest
        except ValueError:
            notes.append(f"{fs.join(run, 'rooflens.json')} is not valid JSON; ignored")
            return RunManifest()
    return RunManifest()


def saved_hlo(runs: list[str], hlo_dir: str | Path | None) -> dict[str, str]:
    """HLO text files beside the trace (``rl.capture``, ``rooflens run``) or given: the first run's win."""
    saved: dict[str, str] = {}
    for run in reversed(runs):
        if _has_saved_hlo(run):
            saved.update(read_hlo_dir(Path(run) / "hlo"))
    if hlo_dir is not None:
        saved.update(read_hlo_dir(hlo_dir))
    return saved


def shifted(steps, shift_ps: int) -> list[tuple[int, float, float]]:
    """A host's steps (ps from its own origin) in ns from an origin ``shift_ps`` earlier."""
    return sorted((n, (s + shift_ps) * 1e-3, (e + shift_ps) * 1e-3) for n, s, e in steps)


def assemble(paths: list[str], runs: list[str], raws: list[RawTrace], files: list[str],
             hlo_dir: str | Path | None = None) -> Profile:
    """The hosts read (``raws``, in the order of ``files``) as one profile: one time axis, the job's steps,
    the run's manifest and HLO, its warm-up judged."""
    from rooflens.trace.align import aligned_hosts

    raws, clock_notes = aligned_hosts(raws)  # hosts on clocks of their own (Nsight sessions): one time axis
    table = concat([r.table for r in raws])
    steps_by_host = [shifted(r.steps, (r.table.origin_ns - table.origin_ns) * 1000) for r in raws]
    for k, host_steps in enumerate(steps_by_host):  # each host's steps hold its own events
        assign_steps(table, host_steps, rows=np.flatnonzero(table.host == table.hosts.index(raws[k].host)))
    steps = job_steps(steps_by_host)
    notes = [n for r in raws for n in r.notes] + clock_notes
    shift_ns = {r.host: float(r.table.origin_ns - table.origin_ns) for r in raws}
    dispatches_of = {r.host: {fn: d * 1e-3 + shift_ns[r.host] for fn, d in r.dispatches.items()} for r in raws
                     if r.dispatches}
    end_ns_of = {r.host: r.end_ps * 1e-3 + shift_ns[r.host] for r in raws if r.end_ps}
    if not len(table):
        from rooflens.trace.dispatch import unran_dispatches, unran_note

        none = (np.zeros((0, 4), np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0, bool))
        queued = [u for u in unran_dispatches(table, none, dispatches_of, end_ns_of) if u.queued]
        why = (("; " + unran_note(queued[0], stats=False)) if queued
               else ": was anything running on the devices while it was traced?")
        raise RooflensError(f"{', '.join(paths)} has no device op events (no XLA ops on any device or CPU "
                            f"thread){why}.")
    platform = next((r.platform for r in raws if r.platform != "unknown"), "unknown")
    manifest = run_manifest(runs, notes)
    saved = saved_hlo(runs, hlo_dir)
    # a program the trace names plainly (compiled once) is served by its saved text: its proto need not be
    # printed; one compiled several times (jit_dot(5), jit_dot(49)) keeps its own module from the trace
    hlo_texts = _embedded_hlo(raws, files, table, skip={k for k in saved if k in table.programs})
    hlo_texts.update(saved)
    host_events_of = {r.host: host_frames(r.host_events, (r.table.origin_ns - table.origin_ns) * 1000) for r in raws}
    host_events = sorted((h for evs in host_events_of.values() for h in evs), key=lambda h: h[1])
    profile = Profile(
        path=", ".join(paths), table=table, steps=steps, platform=platform,
        device_kind=next((r.device_kind for r in raws if r.device_kind != "unknown"), "unknown"),
        hosts=[r.host for r in raws], sources=files, notes=notes, metadata=manifest.to_dict(), manifest=manifest,
        hlo_texts=hlo_texts, plane_stats=next((r.plane_stats for r in raws if r.plane_stats), {}),
        host_events=host_events, host_events_of=host_events_of, events_total=sum(r.events_total for r in raws),
        dispatches_of=dispatches_of, end_ns_of=end_ns_of,
    )
    if not steps:
        profile.notes.append(NO_STEPS)
    missing = sorted(p for p in {table.programs[p] for p in np.unique(table.program).tolist()}  # "": no program
                     if p and p not in hlo_texts and re.sub(r"\(\d+\)$", "", p) not in hlo_texts)
    if missing:
        profile.notes.append(no_hlo_note(missing))
    from rooflens.trace.dispatch import unran_dispatches, unran_note
    from rooflens.trace.warmup import execution_spans, judge  # a run traced from its start: warm-up apart

    if dispatches_of:  # before warm-up is judged: every execution in the trace ran a dispatch
        profile.unran = unran_dispatches(table, execution_spans(table), dispatches_of, end_ns_of)
        profile.notes.extend(unran_note(u) for u in profile.unran)
        if profile.steps and any(u.queued for u in profile.unran):
            profile.steps = ran_steps(profile)
    return judge(profile)


def ran_steps(profile: Profile) -> list[tuple[int, float, float]]:
    """The annotated steps whose work ran inside the trace: a trace that stopped with work still queued has
    steps the host annotated (and dispatched) whose work never ran; the last steps go, one per dispatch of the
    program left most unrun (said in a note). Step annotations time the host: when it runs ahead of the
    devices, a step's device work runs inside later steps' spans."""
    u = max((u for u in profile.unran if u.queued), key=lambda u: (u.unran, u.missing_s))
    steps = sorted(profile.steps)
    keep = max(len(steps) - u.unran, 0)
    if keep < len(steps):
        profile.notes.append(f"the last {len(steps) - keep} annotated step(s) dispatched work of {u.program} that "
                             "never ran inside the trace: left out of the steps")
        t = profile.table
        t.step[~np.isin(t.step, [n for n, _, _ in steps[:keep]])] = -1
    return steps[:keep]


NO_STEPS = ("the trace has no step annotations (jax.profiler.StepTraceAnnotation) or Steps line, so there are no "
            "per-step times")


def no_hlo_note(missing: list[str]) -> str:
    return (f"no HLO for {', '.join(missing[:5])} (the trace does not carry it): those ops have no named scope; "
            "give --hlo DUMP_DIR, or capture with rl.capture")


def host_frames(host_events, shift_ps: int) -> list[tuple[str, float, float]]:
    """A host's Python frames (ps from its own origin) in ns from an origin ``shift_ps`` earlier, by start."""
    return sorted(((name, (s + shift_ps) * 1e-3, (e + shift_ps) * 1e-3) for name, s, e in host_events),
                  key=lambda h: h[1])
