"""The measured run as one object: :class:`Profile` (device op events, steps, the programs' HLO) and what
each op is (:class:`OpInfo`: category, named scope, opcode, from the HLO or the op's name).

Reading is :mod:`rooflens.trace.loading` (``rl.load``); putting the hosts read on one time axis is
:mod:`rooflens.trace.assemble`. This module imports neither, so the measurement (stats, warm-up, idle,
the pod reduce) depends on the type without depending on how it is made.
"""

from __future__ import annotations

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
from rooflens.trace.events import EventTable
from rooflens.trace.manifest import RunManifest

if TYPE_CHECKING:
    from rooflens.trace.reduce import Reduced



def made_once(make):
    """A ``cached_property`` made once even when threads ask together (from Python 3.12 ``cached_property`` no longer
    serializes them): each property its own lock, as one may ask for another while it is made."""
    lock = threading.Lock()
    name = make.__name__

    def get(self):
        with lock:
            if name not in self.__dict__:  # else made by another thread while this one waited
                self.__dict__[name] = make(self)
            return self.__dict__[name]

    get.__name__, get.__doc__ = name, make.__doc__
    return cached_property(get)


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
    framework: str = ""  # "JAX", "TensorFlow", "PyTorch", or "" (not known): what made the trace, as it shows
    # the step model (rooflens.trace.steps): the step program and why (a StepChoice), and the host's own marked
    # spans (number, start ns, end ns) where the steps are the device's work dispatched inside them
    step_choice: object = None
    # (program, op) of the GPU ops whose kernels ran inside XLA command buffers (rooflens.trace.command_buffers):
    # launched as one graph each when the run is not profiled
    command_buffer_ops: frozenset = frozenset()
    marked_steps: list[tuple[int, float, float]] = field(default_factory=list)

    @made_once
    def modules(self) -> dict[str, H.Module]:
        """Each program's HLO, parsed once even when threads ask together (the memory files are read beside the
        analysis, which parses the HLO on a thread of its own too)."""
        out = {}
        for name, text in self.hlo_texts.items():
            try:
                out[name] = H.parse(text)
            except H.HloParseError:
                self.notes.append(f"the HLO saved for {name} could not be read; its ops have no scope or category")
        return out

    def _hlo_name(self, program: str) -> str | None:
        """Under which name ``program`` (``jit_dot(49)``) has its HLO: its own, else its name without the id."""
        return next((n for n in (program, re.sub(r"\(\d+\)$", "", program)) if self.modules.get(n)), None)

    def module_for(self, program: str) -> H.Module | None:
        """The HLO of ``program`` (``jit_dot(49)``), or of its name when only that is known."""
        name = self._hlo_name(program)
        return self.modules[name] if name is not None else None

    def hlo_text_for(self, program: str) -> str | None:
        """The text :meth:`module_for` parsed ``program``'s HLO from (None where it has none)."""
        name = self._hlo_name(program)
        return self.hlo_texts.get(name) if name is not None else None

    @made_once
    def op_info(self) -> dict[tuple[str, str], OpInfo]:
        """(program, op) → category and named scope, from the programs' HLO where known. Made once even
        when threads ask together (the analysis parses the HLO on a thread of its own)."""
        t = self.table
        out: dict[tuple[str, str], OpInfo] = {}
        pairs = ([(t.programs[p], t.names[n]) for p, n in t.pairs().tolist()] if self.reduced is None
                 else self.reduced.ops)
        for program, name in pairs:
            out[(program, name)] = _op_info(self.module_for(program), name, t.hlo_text.get((program, name)),
                                            t.op_meta.get((program, name), {}))
        return out


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
    for op in ins.operands:  # the operand's type as the instruction prints it, else as its module defines it
        s = op.shape if getattr(op, "shape", None) is not None else (
            module.operand_shape(op) if module is not None else None)
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
    # custom call (cuDNN); cuFFT's and rocFFT's kernels name their FFTs (regular_fft, vector_fft, fft_rtc_…)
    # (not Eigen's TensorConversionOp: "conv" of a convolution, not of a conversion; ROCm's runtime copy kernel)
    for key, cat in (("gemm", "matmul"), ("cublas", "matmul"), ("nvjet", "matmul"), (r"conv(?!er)", "convolution"),
                     ("elementwise", "elementwise"), ("flash", "attention"), ("fmha", "attention"), ("fft", "fft"),
                     ("copybuffer", "copy/transpose")):
        if re.search(key, low):
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
