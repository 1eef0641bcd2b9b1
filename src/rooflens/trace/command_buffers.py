"""GPU kernels that ran inside an XLA command buffer, given back to their HLO ops.

XLA:GPU gathers runs of thunks into command buffers (CUDA graphs). While a profiler is active it runs
them one thunk at a time (``--xla_enable_command_buffers_during_profiling`` is off by default), but every
kernel inside carries the command buffer's annotation as its ``hlo_op`` (``command_buffer_1``), not its
own op's: on jaxlib 0.11 and an H100, a Flax MLP's step ran 33 kernels a step under ``command_buffer_1``,
its eight matmuls among them, so the step had no op to price and no MFU.

Each kernel still has its own name. An XLA fusion's kernel is named after the fusion (``loop_add_fusion_3``
for ``loop_add_fusion.3``), or after the fusion whose kernel it reuses (its ``deduplicated_name``, so one
kernel name can stand for several fusions); a library call's kernel is the library's (``nvjet_sm90_…``
for a cuBLAS matmul), with a memset before it. So the kernels of a program on one device, in time order,
are walked against the program's schedule (:func:`schedule`: the entry computation in order, loop bodies and
other called computations in place): a fusion's kernel is the next instruction launching that kernel (inside a
loop, the rest of the loop first, then its next trip); another kernel, the next launching instruction that is
not a fusion (a custom call, a collective, a copy, a dynamic slice run as a copy); a memset or a copy goes with
the op after it. The walk wraps at the schedule's end (the next execution). A kernel that fits nowhere keeps
the command buffer's name, and the note says how many did. Checked against the same programs compiled without
command buffers (tests/test_gpu_h100.py).

The readers (XSpace, Chrome JSON) name such a kernel ``{hlo_op}{SEP}{kernel}``; :func:`attribute` (called by
:func:`rooflens.trace.assemble.assemble`) resolves every such name, with the HLO or without it.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from rooflens.trace.events import EventTable, unique_rows

SEP = "\x1f"  # between the command buffer's name and the kernel's, until attribute() resolves it
COMMAND_BUFFER = re.compile(r"^command_buffer")
#: instructions that launch nothing on the device (their results are views, tuples or host-side values)
_NO_LAUNCH = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all",
                        "add-dependency", "opt-barrier", "partition-id", "replica-id", "domain"})
_DONE = re.compile(r"-done$")
_DEDUP = re.compile(r'deduplicated_name="([^"]+)"')


def labelled(names: np.ndarray, kernels: np.ndarray, words: list[str], code, kernel_name) -> np.ndarray:
    """A reader's op name codes of GPU kernels (``names``, into ``words``; ``code(text)`` adds one), with each kernel
    run inside a command buffer (its op one named ``command_buffer_1``) named ``command_buffer_1{SEP}{kernel}``, for
    :func:`attribute`. ``kernels``: a key per kernel for its own name, ``kernel_name(key)`` that name."""
    buffers = [c for c, w in enumerate(words) if COMMAND_BUFFER.match(w)]
    inside = np.flatnonzero(np.isin(names, buffers)) if buffers else np.zeros(0, np.int64)
    if not len(inside):
        return names
    names = names.copy()
    pair, inv = unique_rows(names[inside], kernels[inside])
    texts = [f"{words[a]}{SEP}{kernel_name(b) or 'kernel'}" for a, b in pair.tolist()]
    names[inside] = np.asarray([code(t) for t in texts], names.dtype)[inv.ravel()]
    return names


def kernel_key(name: str) -> str:
    """The name of the kernel XLA emits for an instruction name (LLVM function names: ``.``/``-`` → ``_``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


#: instructions whose work is a computation they run (a loop's condition and body, a branch, a callee, an async
#: wrapper's fused op): their kernels are that computation's, in its order, where the instruction stands
_INLINE = {"while": ("condition", "body"), "conditional": ("branch_computations", "true_computation",
                                                         "false_computation"),
           "call": ("to_apply",), "async-start": ("calls",)}


def schedule(module) -> tuple[list[tuple[str, str]], dict[str, str], list[tuple[tuple[int, int], ...]]]:
    """The launching instructions of a module in the order it runs them: the entry computation's, with a loop's
    condition and body, a conditional's branches, a call's callee and an async op's wrapped computation in its
    place (once: the walk goes round them again for each trip); for each, the kernel it launches for a fusion,
    "" for any other op (a library call, a collective, a copy); kernel name → that kernel, for every fusion; and for
    each slot the loops around it, innermost first, as [first slot, end) of each loop's condition and body.

    Fusions that share a kernel (``deduplicated_name``) share one key, the kernel being named after
    whichever of them XLA emitted first (not always the one the others name), so each fusion's own
    sanitized name stands for the shared kernel."""
    slots: list[tuple[str, str]] = []
    aliases: dict[str, str] = {}
    loops: list[list[int]] = []  # every loop's [first slot, end)
    open_loops: list[int] = []  # the loops being visited, outermost first
    inside: list[tuple[int, ...]] = []  # per slot, its loops, innermost first
    if module is None or module.entry is None:
        return slots, aliases, []

    def add(slot: tuple[str, str]) -> None:
        slots.append(slot)
        inside.append(tuple(reversed(open_loops)))

    def visit(comp, depth: int) -> None:
        for ins in comp.instructions:
            if ins.opcode in _NO_LAUNCH or _DONE.search(ins.opcode):
                continue
            inline = _INLINE.get(ins.opcode) or (_INLINE["async-start"] if ins.opcode.endswith("-start")
                                                 and ins.attrs.get("calls") else None)
            if inline and depth < 8:
                if ins.opcode == "while":
                    open_loops.append(len(loops))
                    loops.append([len(slots), len(slots)])
                for key in inline:
                    called = ins.attrs.get(key)
                    for name in (called if isinstance(called, tuple) else (called,) if called else ()):
                        inner = module.computation(str(name))
                        if inner is not None:
                            visit(inner, depth + 1)
                if ins.opcode == "while":
                    loops[open_loops.pop()][1] = len(slots)
                continue
            if ins.opcode == "fusion" and _is_copy(module, ins):
                add((ins.name, ""))  # run as a copy (MemcpyD2D, or a graph's memcpy32_post kernel)
            elif ins.opcode == "fusion":
                m = _DEDUP.search(ins.raw_attrs.get("metadata", "")) or _DEDUP.search(ins.text)
                key = m.group(1) if m else _fingerprint(module, ins)
                add((ins.name, key))
                aliases[kernel_key(ins.name)] = key
                aliases.setdefault(kernel_key(key), key)
            else:
                add((ins.name, ""))

    visit(module.entry, 0)
    return slots, aliases, [tuple((loops[k][0], loops[k][1]) for k in ks) for ks in inside]


_SLICES = frozenset({"dynamic-slice", "dynamic-update-slice"})


def _is_copy(module, ins) -> bool:
    """A fusion XLA runs as a memory copy, not a kernel of its own: one whose fused computation is a dynamic slice
    or update of its input (``loop_dynamic_slice_fusion.22``, a scan's per-layer slice of the stacked weights)."""
    for name in ins.called_computations:
        comp = module.computation(name)
        root = comp.root if comp is not None else None
        while root is not None and root.opcode in ("bitcast", "copy") and root.operands:
            root = module.find(root.operands[0].name)
        if root is not None and root.opcode in _SLICES:
            return True
    return False


def _fingerprint(module, ins) -> str:
    """A fusion's kernel as XLA reuses it when no ``deduplicated_name`` says so: fusions whose fused computations
    are the same up to names (each instruction's opcode, result shape and operands by position) and that take and
    give the same shapes launch one kernel."""
    body = []
    for name in ins.called_computations:
        comp = module.computation(name)
        if comp is None:
            return ins.name
        at = {i.name: k for k, i in enumerate(comp.instructions)}
        body.append(tuple((i.opcode, str(i.shape), tuple(at.get(o.name, -1) for o in i.operands), i.parameter_number)
                          for i in comp.instructions))
    shapes = (str(ins.shape), tuple(str(module.operand_shape(o)) for o in ins.operands), ins.raw_attrs.get("kind"))
    return f"#{hash((tuple(body), shapes)):x}"


def walk(kernels: list[str], slots: list[tuple[str, str]], aliases: dict[str, str],
         loops: list[tuple[tuple[int, int], ...]] | None = None) -> list[str | None]:
    """Each kernel's instruction (None: no fit), walking ``slots`` (:func:`schedule`) in time order. Inside a loop
    (``loops``: per slot, the loops around it), a kernel is looked for in the rest of the loop, then from the loop's
    start (its next trip), before past it: loops' bodies can share a kernel (a forward and a backward scan)."""
    out: list[str | None] = [None] * len(kernels)
    if not slots:
        return out
    by_kernel: dict[str, list[int]] = {}
    library = []
    for j, (_, key) in enumerate(slots):
        if key:
            by_kernel.setdefault(key, []).append(j)
        else:
            library.append(j)
    pos, last, pending = 0, -1, []
    for i, k in enumerate(kernels):
        if k.startswith(("Memset", "Memcpy")):
            pending.append(i)  # prepares the op after it (a library call's workspace)
            continue
        cands = by_kernel.get(aliases.get(k, ""))
        if cands is None:
            if not library:
                continue
            cands = library
        j = None
        for a, b in (loops[last] if loops and last >= 0 else ()):
            j = _first_in(cands, pos, b)
            if j is None:
                j = _first_in(cands, a, pos)
            if j is not None:
                break
        if j is None:
            j = _next_at_or_after(cands, pos)
        out[i] = slots[j][0]
        for p in pending:
            out[p] = slots[j][0]
        pending = []
        last = j
        pos = j + 1 if j + 1 < len(slots) else 0
    return out


def _first_in(positions: list[int], lo: int, hi: int) -> int | None:
    """The first position in [lo, hi) of the sorted list, or None."""
    k = int(np.searchsorted(positions, lo))
    return positions[k] if k < len(positions) and positions[k] < hi else None


def _next_at_or_after(positions: list[int], pos: int) -> int:
    """The first position ≥ ``pos`` in the sorted list, wrapping to the first."""
    k = int(np.searchsorted(positions, pos))
    return positions[k] if k < len(positions) else positions[0]


def attribute(table: EventTable, modules_of) -> tuple[EventTable, list[str], frozenset]:
    """The table with every command-buffer kernel named by its HLO op (``modules_of(program)``: its parsed
    module, or None), a note on what was done, and the (program, op) pairs those kernels ran; the table itself
    when it has none."""
    composite = [k for k, n in enumerate(table.names) if SEP in n]
    if not composite:
        return table, [], frozenset()
    names = list(table.names)
    code = {n: k for k, n in enumerate(names)}

    def code_of(n: str) -> int:
        if n not in code:
            code[n] = len(names)
            names.append(n)
        return code[n]

    name = table.name.copy()
    rows = np.flatnonzero(np.isin(name, composite))
    done = left = 0
    by_buffer: dict[str, int] = {}
    order = rows[np.lexsort((table.start_ps[rows], table.device[rows], table.host[rows], table.program[rows]))]
    keys = np.stack([table.program[order], table.host[order], table.device[order]], axis=1)
    cuts = np.flatnonzero(np.any(np.diff(keys, axis=0) != 0, axis=1)) + 1
    for group in np.split(order, cuts):
        program = table.programs[int(table.program[group[0]])]
        parts = [names[int(c)].split(SEP, 1) for c in name[group]]
        found = walk([k for _, k in parts], *schedule(modules_of(program)))
        for r, (buffer, _), op in zip(group.tolist(), parts, found):
            if op is None:
                name[r] = code_of(buffer)
                left += 1
                by_buffer[buffer] = by_buffer.get(buffer, 0) + 1
            else:
                name[r] = code_of(op)
                done += 1
    out = dataclasses.replace(table, name=name, names=names)
    ran = frozenset((out.programs[p], out.names[n]) for p, n in unique_rows(out.program[rows], name[rows])[0].tolist())
    note = (f"{done + left:,} GPU kernels ran inside XLA command buffers, which a trace labels with the buffer's name "
            f"only: {done:,} were given back to their HLO ops by kernel name and the program's schedule")
    if left:
        note += (f"; {left:,} could not be ({', '.join(sorted(by_buffer))}: no HLO for their program, or kernels "
                 "outside its entry schedule), and keep the buffer's name")
    return out, [note], ran
