"""``rl.predict``: lower a JAX function here and price it on any chip in the catalogue.

Which HLO is priced:

* on the calibrated ``local`` chip, the optimized module XLA compiled for this machine (what
  will run, fusions and all);
* on any other chip, the module right after SPMD partitioning (``xla_dump_hlo_pass_re``): it
  keeps the program's dtypes (XLA:CPU later widens bf16 matmuls and collectives to f32) and
  carries the collectives the mesh implies, but it is not fused yet, so ops are grouped as a
  TPU/GPU compiler would fuse them (:mod:`rooflens.cost.fuse`). A single-device program has no
  partitioning pass; its module before optimizations is used.

Arguments may be arrays or ``jax.ShapeDtypeStruct`` (with a ``sharding`` for meshes), so a
17-TFLOP matmul is priced without allocating it. Forced CPU devices stand in for the target's.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from rooflens import hlo as H
from rooflens.cost.model import Prediction, predict_module
from rooflens.errors import RooflensError
from rooflens.hardware import LOCAL_CHIP, Chip, shared_by
from rooflens.hardware import chip as get_chip
from rooflens.hlo.shape import NUMPY_NAMES
from rooflens.units import fmt_bytes

_SPEC_RE = re.compile(r"^\s*([a-z]+[0-9a-z]*)\s*\[\s*([0-9,\s]*)\]\s*(?:@\s*(.*))?$")
DTYPE_NAMES = NUMPY_NAMES  # HLO name → NumPy name, the one table in rooflens.hlo.shape


MAX_MESH_DEVICES = 16_384  # above the largest pods (TPU v5p: 8,960 chips); each is a CPU device here


def parse_mesh_spec(spec: str | Mapping[str, int]) -> dict[str, int]:
    """``"data=4,model=2"`` → ``{"data": 4, "model": 2}`` (or a RooflensError saying what is wrong)."""
    if isinstance(spec, Mapping):
        items = list(spec.items())
    else:
        items = []
        for part in filter(None, (p.strip() for p in str(spec).split(","))):
            name, eq, size = part.partition("=")
            if not eq or not name.strip().isidentifier() or not size.strip().isdigit():
                raise RooflensError(f"bad mesh {spec!r}: write axis=size pairs, e.g. data=4,model=2.")
            items.append((name.strip(), int(size)))
    if not items or any(int(n) < 1 for _, n in items):
        raise RooflensError(f"bad mesh {spec!r}: write axis=size pairs with sizes ≥ 1, e.g. data=4,model=2.")
    if len({k for k, _ in items}) != len(items):
        raise RooflensError(f"bad mesh {spec!r}: an axis name appears twice.")
    total = 1
    for _, n in items:
        total *= int(n)
    if total > MAX_MESH_DEVICES:
        raise RooflensError(f"bad mesh {spec!r}: it needs {total:,} devices, more than any slice or pod "
                            f"(at most {MAX_MESH_DEVICES:,} here).")
    return {k: int(v) for k, v in items}


MAX_ELEMENTS = (1 << 63) - 1  # XLA counts elements in an int64


def _check_elements(spec: str, dims: tuple[int, ...]) -> None:
    n = 1
    for d in dims:
        if d > MAX_ELEMENTS:
            raise RooflensError(f"bad --arg {spec!r}: the dimension {d} is beyond XLA's limit of 2^63 - 1.")
        n *= d
    if n > MAX_ELEMENTS:
        raise RooflensError(f"bad --arg {spec!r}: its dimensions multiply to {n:.3g} elements, beyond XLA's limit "
                            "of 2^63 - 1.")


def _largest_memory_bytes() -> float:
    """The most memory one device of the catalogue has (the largest HBM of any chip)."""
    from rooflens.hardware import chip_rows

    return max((r.hbm_bytes for r in chip_rows() if r.hbm_bytes), default=0.0)


def _check_bytes(spec: str, dims: tuple[int, ...], itemsize: int, split: int) -> None:
    """Refuse an argument whose share on one device is larger than any chip's memory (a typo, surely)."""
    n = 1
    for d in dims:
        n *= d
    per_device_bytes = n * itemsize / max(split, 1)
    largest = _largest_memory_bytes()
    if largest and per_device_bytes > largest:
        share = "" if split == 1 else f" per device (split {split} ways)"
        raise RooflensError(f"bad --arg {spec!r}: it takes {fmt_bytes(per_device_bytes)}{share}, more than the "
                            f"memory of any chip in the catalogue (the largest has {fmt_bytes(largest)}).")


def parse_arg_spec(spec: str, mesh=None):
    """``'bf16[32,1024,8192]'`` (optionally ``@data,_,_`` to shard dims over mesh axes) → ShapeDtypeStruct."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    m = _SPEC_RE.match(spec)
    if not m:
        raise RooflensError(f"bad --arg {spec!r}: write a dtype and dims like 'bf16[32,1024,8192]' "
                            "(add '@data,_,_' to shard dimensions over mesh axes).")
    dtype_name, dims_text, shard_text = m.groups()
    if dtype_name not in DTYPE_NAMES:
        raise RooflensError(f"bad --arg {spec!r}: unknown dtype {dtype_name!r} (use one of "
                            f"{', '.join(sorted(DTYPE_NAMES))}).")
    try:
        dims = tuple(int(d) for d in dims_text.split(",") if d.strip())
    except ValueError:
        raise RooflensError(f"bad --arg {spec!r}: dimensions must be integers.") from None
    _check_elements(spec, dims)  # before numpy or XLA see them (XLA aborts the process on an overflow)
    dtype = jnp.dtype(DTYPE_NAMES[dtype_name])
    if shard_text is None:
        _check_bytes(spec, dims, dtype.itemsize, 1)
        return jax.ShapeDtypeStruct(dims, dtype)
    if mesh is None:
        raise RooflensError(f"--arg {spec!r} shards over mesh axes; give --mesh too.")
    parts = [p.strip() for p in shard_text.split(",")]
    if len(parts) != len(dims):
        raise RooflensError(f"bad --arg {spec!r}: {len(parts)} sharding entries for {len(dims)} dimensions.")
    entries = []
    for p in parts:
        if p in ("", "_", "None", "none"):
            entries.append(None)
            continue
        axes = tuple(a.strip() for a in p.split("+"))
        unknown = [a for a in axes if a not in mesh.axis_names]
        if unknown:
            raise RooflensError(f"bad --arg {spec!r}: mesh has no axis {unknown[0]!r} "
                                f"(axes: {', '.join(mesh.axis_names)}).")
        entries.append(axes[0] if len(axes) == 1 else axes)
    split = 1
    for e in entries:
        for a in (() if e is None else (e,) if isinstance(e, str) else e):
            split *= int(mesh.shape[a])
    _check_bytes(spec, dims, dtype.itemsize, split)
    return jax.ShapeDtypeStruct(dims, dtype, sharding=NamedSharding(mesh, PartitionSpec(*entries)))


def make_mesh(spec, devices=None):
    """A jax Mesh over this machine's devices (CPU devices stand in for the target's)."""
    import jax
    from jax.sharding import AxisType, Mesh

    if isinstance(spec, Mesh):
        return spec
    axes = parse_mesh_spec(spec)
    need = 1
    for n in axes.values():
        need *= n
    devices = list(devices if devices is not None else jax.devices())
    if len(devices) < need:
        raise RooflensError(
            f"the mesh {','.join(f'{k}={v}' for k, v in axes.items())} needs {need} devices but JAX sees "
            f"{len(devices)}; set XLA_FLAGS=--xla_force_host_platform_device_count={need} before importing jax.")
    return jax.make_mesh(tuple(axes.values()), tuple(axes), axis_types=(AxisType.Auto,) * len(axes),
                         devices=devices[:need])


def _abstract(x):
    import jax

    if isinstance(x, jax.ShapeDtypeStruct):
        return x
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)
                                    if isinstance(x, jax.Array) else None)
    return x


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__).rstrip(".")[:300]


def _mesh_context(mesh):
    """Make ``mesh`` current while lowering, so ``P('data')`` in sharding constraints resolves."""
    import contextlib

    import jax

    if mesh is None:
        return contextlib.nullcontext()
    for setter in (getattr(jax, "set_mesh", None), getattr(jax.sharding, "use_mesh", None)):
        if setter is not None:
            return setter(mesh)
    return mesh  # older JAX: a Mesh is itself a context manager


def lower_and_dump(fn, args, kwargs, mesh=None):
    """Compile ``fn`` here, returning (compiled, {dump file kind: HLO text})."""
    import jax

    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    abstract = [jax.tree_util.tree_map(_abstract, a) for a in args]
    dump = Path(tempfile.mkdtemp(prefix="rooflens-predict-"))
    try:
        try:
            with _mesh_context(mesh):
                lowered = jitted.lower(*abstract, **kwargs)
        except RooflensError:
            raise
        except Exception as e:
            name = getattr(fn, "__name__", "the function")
            raise RooflensError(f"{name} failed to lower with these arguments ({type(e).__name__}: "
                                f"{_first_line(e)}).") from e
        try:
            compiled = lowered.compile(compiler_options={
                "xla_dump_to": str(dump), "xla_dump_hlo_pass_re": "spmd-partitioning"})
        except Exception as e:
            raise RooflensError(f"XLA failed to compile the function ({type(e).__name__}: {_first_line(e)}).") from e
        texts = {"optimized": compiled.as_text()}
        spmd = sorted(dump.glob("*after_spmd-partitioning*.txt"))
        before = sorted(dump.glob("*before_optimizations.txt"))
        if spmd:
            texts["after_spmd_partitioning"] = spmd[-1].read_text()
        if before:
            texts["before_optimizations"] = before[-1].read_text()
        return compiled, texts
    finally:
        shutil.rmtree(dump, ignore_errors=True)


def predict(fn, *args, chip: str | Chip = "local", mesh=None, topology: str | None = None,
            emulate_fusion: bool | None = None, **kwargs) -> Prediction:
    """Predict ``fn(*args)`` op by op on ``chip`` (a catalogue name, ``"local"``, or a Chip).

    ``mesh`` is a ``jax.sharding.Mesh`` or ``"data=4,model=2"``; args then carry their
    shardings (``jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, P(...)))``)
    and the prediction is per device. ``topology`` is the TPU slice's physical shape (``"4x4"``,
    ``"2x2x4"``); with it, collectives are priced on the torus axes their groups really span.
    """
    c = get_chip(chip)
    mesh_obj = make_mesh(mesh) if mesh is not None else None
    _, texts = lower_and_dump(fn, args, kwargs, mesh_obj)
    assumptions = []
    if c.name == LOCAL_CHIP:
        key, source = "optimized", "the optimized HLO XLA compiled for this machine"
    elif "after_spmd_partitioning" in texts:
        key, source = "after_spmd_partitioning", "the HLO after SPMD partitioning (program dtypes, collectives)"
    else:
        key = "before_optimizations" if "before_optimizations" in texts else "optimized"
        source = "the HLO before optimizations (program dtypes; one device, no partitioning)"
    module = H.parse(texts[key])
    if c.kind == "cpu" and module.num_devices > 1:
        # forced CPU devices split the one machine that calibration measured running alone
        c = shared_by(c, module.num_devices)
        assumptions.append(f"the {module.num_devices} CPU devices share this machine: each gets 1/"
                           f"{module.num_devices} of the calibrated throughput (a measured trace shows how many "
                           "really run at once)")
    fused = any(i.opcode == "fusion" for i in module.instructions())
    if emulate_fusion is None and not fused:
        assumptions.append("ops are grouped into kernels as XLA's producer-consumer fusion would (estimate)")
    if c.kind == "tpu" and topology:
        assumptions.append(f"slice topology {topology}, device ids laid out first axis fastest; a group uses "
                           "wraparound only on an axis it covers whole (per the chip's rule); one ICI link one way "
                           "per direction per axis")
    elif c.kind == "tpu":
        assumptions.append("collectives run as rings on the torus axes their groups span (the chip's published "
                           "slice for this many devices, else one axis; wraparound per the chip's topology rule; "
                           "give a topology such as 4x4 to place groups by device id); one ICI link one way per "
                           "direction per axis")
    elif c.kind == "gpu":
        assumptions.append(f"collectives inside a {c.scaleup_link} domain see its bandwidth one way (a switch: the "
                           "GPU's whole NVLink; a fully connected board: one link per peer)")
    assumptions.append(f"one JAX device = one {c.device_unit}; times are per device")
    return predict_module(module, c, source=source, emulate_fusion=emulate_fusion, assumptions=tuple(assumptions),
                          topology=topology)
