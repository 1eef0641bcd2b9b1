"""What one HLO instruction computes: FLOPs and transcendentals, with the formula in words.

The counting rules are XLA's own (``HloCostAnalysis``), so a module's total agrees with
``compiled.cost_analysis()["flops"]``:

* dot: 2 × (output elements) × (product of contracted dims); batch dims are in the output once;
* convolution: 2 × output batch × output features × input features per group × the number of
  (output position, kernel position) pairs that land on a real input element (padding and
  dilation counted exactly);
* elementwise: 1 per output element, except transcendentals (exp, log, tanh, power, …), which
  are counted separately; ``select`` and ``clamp`` count 1;
* reduce: (input elements − output elements) × the reducer's FLOPs; reduce-window: output
  elements × (window elements − 1) × reducer FLOPs; scatter: update elements × combiner FLOPs;
  all-reduce: elements × reducer FLOPs; sort: n·log2(n) over all elements;
* fft: 5 × N·log2(N) per transform of N = Π fft_length points, 2.5 × for a real one (FFTW's convention, its
  benchFFT methodology: https://www.fftw.org/speed/method.html); XLA's HloCostAnalysis multiplies the lengths'
  log2s instead, which counts a 64×64 transform's work 3× and a 64³ one's 12×;
* factorizations and triangular solves (LAPACK, cuSOLVER/hipSOLVER, cuBLAS's triangular solve, XLA's cholesky
  and triangular-solve): LAPACK Working Note 41's operation counts (:func:`solver_counts`);
* data movement, layout, control and collectives without a reduction: 0.

A fusion's counts are the sum over its body (nested fusions included).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rooflens.cost.kernels import kernel_cost, solver_routine
from rooflens.hlo import Instruction, Module, Shape
from rooflens.hlo.opcodes import MATMUL, MODEL_FLOP_OPCODES
from rooflens.units import fmt_g

TRANSCENDENTAL = frozenset("""
exponential log tanh sqrt rsqrt cbrt logistic sine cosine tan exponential-minus-one log-plus-one erf
power atan2 acos acosh asin asinh atan atanh cosh sinh rng
""".split())
ONE_FLOP = frozenset("""
abs add and ceil clamp compare complex convert count-leading-zeros divide floor imag is-finite maximum
minimum multiply negate not or popcnt real reduce-precision remainder round-nearest-afz round-nearest-even
select shift-left shift-right-arithmetic shift-right-logical sign subtract xor stochastic-convert mulhi
""".split())


@dataclass(frozen=True, slots=True)
class Counts:
    flops: float = 0.0
    transcendentals: float = 0.0
    formula: str = ""  # how the FLOPs were counted, for --explain

    def __add__(self, other: Counts) -> Counts:
        formula = " + ".join(f for f in (self.formula, other.formula) if f)
        return Counts(self.flops + other.flops, self.transcendentals + other.transcendentals, formula)


ZERO = Counts()


def _elements(shape: Shape | None) -> int:
    return 0 if shape is None else sum(s.num_elements for s in shape.leaves() if s.is_array)


def _first_array(shape: Shape | None) -> Shape | None:
    if shape is None:
        return None
    if shape.is_tuple:
        return _first_array(shape.tuple_shapes[0]) if shape.tuple_shapes else None
    return shape


def _dims(value) -> tuple[int, ...]:
    if isinstance(value, tuple):
        return value
    if isinstance(value, int):
        return (value,)
    return ()


def _fmt(n: float) -> str:
    return f"{n:,.0f}" if n < 1e6 else fmt_g(n)


def computation_flops(module: Module, name: str, _depth: int = 0) -> float:
    """FLOPs of one application of a small computation (a reducer such as ``add``)."""
    comp = module.computation(name)
    if comp is None or _depth > 8:  # a malformed module whose reducers call each other: stop
        return 1.0
    return sum(instruction_counts(module, i, _depth + 1).flops for i in comp.instructions)


def _reducer_flops(module: Module, ins: Instruction, depth: int = 0) -> float:
    called = ins.called_computations
    return computation_flops(module, called[0], depth) if called else 1.0


def contracted_size(module: Module, dot: Instruction) -> int:
    """K of a dot: the product of the lhs contracting dimensions (1 for an outer product)."""
    lhs = module.operand_shape(dot.operands[0]) if dot.operands else None
    if lhs is None:
        return 0
    return math.prod(lhs.dims[d] for d in _dims(dot.attrs.get("lhs_contracting_dims")) if d < len(lhs.dims))


def dot_counts(module: Module, ins: Instruction) -> Counts:
    out = _first_array(ins.shape)
    k = contracted_size(module, ins)
    if not k or out is None:
        return ZERO
    n_out = out.num_elements
    flops = 2.0 * n_out * k
    out_dims = "·".join(str(d) for d in out.dims) or "1"
    return Counts(flops, 0.0, f"2 × {out_dims} (output) × {k} (contracted) = {_fmt(flops)}")


def _valid_pairs(out_size: int, kernel: int, in_size: int, stride: int, pad_lo: int,
                 lhs_dil: int, rhs_dil: int) -> int:
    """Number of (output position, kernel position) pairs that read a real input element."""
    dilated_in = (in_size - 1) * lhs_dil + 1 if in_size else 0
    count = 0
    for o in range(out_size):
        base = o * stride - pad_lo
        for k in range(kernel):
            pos = base + k * rhs_dil
            if 0 <= pos < dilated_in and pos % lhs_dil == 0:
                count += 1
    return count


def convolution_counts(module: Module, ins: Instruction) -> Counts:
    if len(ins.operands) < 2:
        return ZERO
    lhs = module.operand_shape(ins.operands[0])
    rhs = module.operand_shape(ins.operands[1])
    out = _first_array(ins.shape)
    labels = ins.attrs.get("dim_labels")
    if lhs is None or rhs is None or out is None or not isinstance(labels, tuple):
        return ZERO
    in_l, k_l, out_l = labels
    window = ins.attrs.get("window") if isinstance(ins.attrs.get("window"), dict) else {}
    spatial = [c for c in out_l if c not in "bf"]
    valid = 1
    for si, c in enumerate(spatial):
        size = window.get("size", ())
        kernel = size[si] if si < len(size) else rhs.dims[k_l.index(c)]
        stride = window.get("stride", ())[si] if si < len(window.get("stride", ())) else 1
        pad = window.get("pad", ())[si] if si < len(window.get("pad", ())) else (0, 0)
        ld = window.get("lhs_dilate", ())[si] if si < len(window.get("lhs_dilate", ())) else 1
        rd = window.get("rhs_dilate", ())[si] if si < len(window.get("rhs_dilate", ())) else 1
        valid *= _valid_pairs(out.dims[out_l.index(c)], kernel, lhs.dims[in_l.index(c)], stride, pad[0], ld, rd)
    groups = int(ins.attrs.get("feature_group_count", 1) or 1)
    in_features = lhs.dims[in_l.index("f")] // max(groups, 1)
    out_features = out.dims[out_l.index("f")]
    batch = out.dims[out_l.index("b")]
    flops = 2.0 * batch * out_features * in_features * valid
    return Counts(flops, 0.0, f"2 × {batch} (batch) × {out_features} (out features) × {in_features} "
                              f"(in features/group) × {valid} (valid window positions) = {_fmt(flops)}")


def instruction_counts(module: Module, ins: Instruction, _depth: int = 0) -> Counts:
    """FLOPs and transcendentals of one instruction (a fusion: of its whole body)."""
    op = ins.opcode
    if op in MATMUL:
        return dot_counts(module, ins)
    if op == "convolution":
        return convolution_counts(module, ins)
    if op == "fusion":
        total = ZERO
        if _depth > 8:  # fusions calling each other in a cycle (malformed text): stop
            return total
        for comp in module.called(ins):
            for inner in comp.instructions:
                total = total + instruction_counts(module, inner, _depth + 1)
        return total
    if op == "custom-call":
        return custom_call_counts(module, ins)
    n = _elements(ins.shape)
    if op in TRANSCENDENTAL:
        return Counts(0.0, float(n), f"{_fmt(n)} transcendentals ({op}, one per element)")
    if op in ONE_FLOP:
        return Counts(float(n), 0.0, f"{_fmt(n)} ({op}, one per element)")
    if op == "reduce":
        half = max(len(ins.operands) // 2, 1)
        inp = module.operand_shape(ins.operands[0]) if ins.operands else None
        n_in = _elements(inp)
        n_out = _elements(_first_array(ins.shape))
        per = _reducer_flops(module, ins, _depth)
        flops = max(n_in - n_out, 0) * per
        what = f" × {half} inputs" if half > 1 else ""
        return Counts(flops, 0.0,
                      f"({_fmt(n_in)} − {_fmt(n_out)}) reduced elements × {per:g} FLOP{what} = {_fmt(flops)}")
    if op == "reduce-window":
        window = ins.attrs.get("window") if isinstance(ins.attrs.get("window"), dict) else {}
        w = math.prod(window.get("size", (1,)))
        n_out = _elements(_first_array(ins.shape))
        per = _reducer_flops(module, ins, _depth)
        flops = n_out * max(w - 1, 0) * per
        return Counts(flops, 0.0, f"{_fmt(n_out)} outputs × ({w} − 1) window × {per:g} = {_fmt(flops)}")
    if op == "scatter":
        upd = module.operand_shape(ins.operands[-1]) if ins.operands else None
        per = _reducer_flops(module, ins, _depth)
        flops = _elements(upd) * per
        return Counts(flops, 0.0, f"{_fmt(_elements(upd))} updates × {per:g} = {_fmt(flops)}")
    if op in ("all-reduce", "all-reduce-start", "reduce-scatter"):
        n_in = sum(_elements(module.operand_shape(o)) for o in ins.operands)
        per = _reducer_flops(module, ins, _depth)
        flops = n_in * per
        return Counts(flops, 0.0, f"{_fmt(n_in)} elements reduced × {per:g} = {_fmt(flops)}")
    if op == "sort":
        inp = module.operand_shape(ins.operands[0]) if ins.operands else None
        n_in = _elements(inp)
        flops = n_in * math.log2(n_in) if n_in > 1 else 0.0
        return Counts(flops, 0.0, f"n·log2(n), n = {_fmt(n_in)} = {_fmt(flops)}")
    if op == "fft":
        points = math.prod(_dims(ins.attrs.get("fft_length"))) or 1
        full = max(n, _elements(module.operand_shape(ins.operands[0])) if ins.operands else 0)  # the full-size side
        per = 2.5 if str(ins.attrs.get("fft_type", "")).upper() in ("RFFT", "IRFFT") else 5.0
        flops = per * full * math.log2(points) if points > 1 else 0.0
        return Counts(flops, 0.0, f"{per:g} × {_fmt(full)} elements × log2({_fmt(points)} points per transform) "
                                  f"= {_fmt(flops)}")
    if op in ("cholesky", "triangular-solve"):
        return solver_counts(module, ins, "potrf" if op == "cholesky" else "trsm")
    if op == "map":
        per = _reducer_flops(module, ins, _depth)
        return Counts(n * per, 0.0, f"{_fmt(n)} elements × {per:g}")
    return ZERO


def custom_call_counts(module: Module, ins: Instruction) -> Counts:
    """FLOPs of library calls whose shape is known: cuBLAS/hipBLAS GEMMs (GPU HLO)."""
    target = (ins.custom_call_target or "").lower()
    cfg = ins.backend_config_json() or {}
    if ("gemm" in target or "matmul" in target) and "grouped" not in target:  # grouped: rooflens.cost.kernels
        dnums = (cfg.get("gemm_backend_config") or cfg).get("dot_dimension_numbers") or {}
        lhs = module.operand_shape(ins.operands[0]) if ins.operands else None
        out = _first_array(ins.shape)
        contracting = tuple(int(d) for d in dnums.get("lhs_contracting_dimensions", ()))
        if lhs is None or out is None or not contracting:
            return ZERO
        k = math.prod(lhs.dims[d] for d in contracting if d < len(lhs.dims))
        flops = 2.0 * out.num_elements * k
        out_dims = "·".join(str(d) for d in out.dims)
        return Counts(flops, 0.0, f"GEMM: 2 × {out_dims} (output) × {k} (contracted) = {_fmt(flops)}")
    if "conv" in target and "dim_labels" in ins.attrs:  # cuDNN/MIOpen convolutions keep XLA's conv attributes
        return convolution_counts(module, ins)
    if (routine := solver_routine(target)) is not None:
        return solver_counts(module, ins, routine)
    kc = kernel_cost(module, ins)  # attention kernels, a Pallas kernel's own estimate (rooflens.cost.kernels)
    return Counts(kc.flops, kc.transcendentals, kc.flops_formula) if kc is not None else ZERO


def _lapack_counts(routine: str, m: float, n: float, k: float) -> tuple[float, float]:
    """(multiplications, additions) of one LAPACK routine on an m×n matrix (k: the reflectors of orgqr/ungqr; for
    trsm, m×n is the right-hand side and the triangle is m×m), LAPACK Working Note 41's table of operation counts
    (Blackford and Dongarra, "Installation Guide for LAPACK", appendix C); a wide matrix (m < n) of getrf or geqrf
    with m and n exchanged (the leading terms are then exact)."""
    if routine in ("getrf", "geqrf") and m < n:
        m, n = n, m
    if routine == "potrf":
        return n ** 3 / 6 + n ** 2 / 2 + n / 3, n ** 3 / 6 - n / 6
    if routine == "getrf":
        return (m * n * n / 2 - n ** 3 / 6 + m * n / 2 - n * n / 2 + 2 * n / 3,
                m * n * n / 2 - n ** 3 / 6 - m * n / 2 + n / 6)
    if routine == "geqrf":
        return (m * n * n - n ** 3 / 3 + m * n + n * n / 2 + 23 * n / 6,
                m * n * n - n ** 3 / 3 + n * n / 2 + 5 * n / 6)
    if routine in ("orgqr", "ungqr"):
        return (2 * m * n * k - (m + n) * k * k + 2 * k ** 3 / 3 + 2 * n * k - k * k - 5 * k / 3,
                2 * m * n * k - (m + n) * k * k + 2 * k ** 3 / 3 + n * k - m * k + k / 3)
    return n * m * (m + 1) / 2, n * m * (m - 1) / 2  # trsm, the triangle on the left


def solver_counts(module: Module, ins: Instruction, routine: str) -> Counts:
    """FLOPs of a factorization or triangular solve (``routine``: one of SOLVER_ROUTINES) over its operands' batch:
    a real one's multiplications and additions, a complex one's at 6 and 2 real FLOPs each (LAPACK Working Note
    41's weights)."""
    shapes = [module.operand_shape(o) for o in ins.operands]
    a = shapes[0] if shapes else None
    if a is None or not a.is_array or len(a.dims) < 2:
        return ZERO
    m, n = a.dims[-2], a.dims[-1]
    batch = math.prod(a.dims[:-2])
    k = 0
    if routine == "trsm":  # the triangle is one operand, the right-hand sides the other (the larger, or the second)
        b = shapes[1] if len(shapes) > 1 and shapes[1] is not None and shapes[1].is_array else None
        if b is None or len(b.dims) < 2:
            return ZERO
        left = ins.attrs.get("left_side")
        rows, cols = b.dims[-2], b.dims[-1]
        on_left = (str(left).lower() == "true") if left is not None else a.dims[-1] == rows
        m, n = (rows, cols) if on_left else (cols, rows)  # a right-side solve is the left one transposed
        batch = max(batch, math.prod(b.dims[:-2]))
    elif routine in ("orgqr", "ungqr"):
        taus = shapes[1] if len(shapes) > 1 and shapes[1] is not None and shapes[1].is_array else None
        k = taus.dims[-1] if taus is not None and taus.dims else n
    mults, adds = _lapack_counts(routine, float(m), float(n), float(k))
    complex_ = a.dtype.startswith("c")
    per = 6 * mults + 2 * adds if complex_ else mults + adds
    flops = batch * per
    what = {"potrf": f"Cholesky of {n}×{n}", "getrf": f"LU of {m}×{n}", "geqrf": f"QR of {m}×{n}",
            "orgqr": f"Q of {m}×{n} from {k} reflectors", "ungqr": f"Q of {m}×{n} from {k} reflectors",
            "trsm": f"triangular solve of {m}×{n} right-hand sides"}[routine]
    kind = ", complex" if complex_ else ""
    return Counts(flops, 0.0, f"{batch} × {what} ({_fmt(per)}{kind}, LAPACK Working Note 41) = {_fmt(flops)}")


MODEL_OPCODES = MODEL_FLOP_OPCODES


def model_flops(module: Module, ins: Instruction, _depth: int = 0) -> float:
    """The FLOPs of the dots and convolutions an instruction runs (inside a fusion too): "model FLOPs".

    A fusion's :func:`instruction_counts` also holds its elementwise work (the bias add, the
    activation); MFU counts only the matmul-like work, as XProf's ``model_flops`` keeps it apart.
    Library calls (cuBLAS/hipBLAS GEMMs, cuDNN/MIOpen convolutions) count as theirs, and so do dense factorizations
    and triangular solves (LAPACK, cuSOLVER: :func:`solver_counts`), blocked into matrix products by the library.
    """
    op = ins.opcode
    if op in MODEL_OPCODES:
        return instruction_counts(module, ins).flops
    if op == "custom-call":
        kc = kernel_cost(module, ins)
        return kc.model_flops if kc is not None else custom_call_counts(module, ins).flops
    if op == "fusion" and _depth <= 8:  # a malformed module whose fusions call each other: stop
        return sum(model_flops(module, inner, _depth + 1) for comp in module.called(ins) for inner in comp.instructions)
    return 0.0


def explain_op(module: Module, op_name: str):
    """One instruction explained in plain words (:func:`rooflens.hlo.explain.explain`), with its FLOPs
    and, for a fusion, how many of them are dot/convolution (model) FLOPs. KeyError for an unknown name."""
    from rooflens.hlo.explain import explain

    exp = explain(module, op_name)
    ins = module[op_name]
    exp.flops, exp.model_flops = instruction_counts(module, ins).flops, model_flops(module, ins)
    if exp.model_flops and ins.opcode == "fusion":
        rest = exp.flops - exp.model_flops
        exp.details.append(f"dot/convolution FLOPs of this fusion (model FLOPs): {exp.model_flops:,.0f}"
                           + (f" of its {exp.flops:,.0f} FLOPs; the other {rest:,.0f} are elementwise work"
                              if rest > 0 else ", all of its FLOPs"))
    return exp


@dataclass(frozen=True, slots=True)
class MatmulDims:
    """The dims a matrix unit tiles: ``batch`` independent ``[M, K] × [K, N]`` products (batch dims are
    not tiled: each batch element is its own product)."""

    batch: int
    m: int
    n: int
    k: int


def matmul_dims(module: Module, ins: Instruction) -> MatmulDims | None:
    """M, N, K (and the batch) of a dot, a convolution (M: batch × output positions, K: input features per
    group, N: output features) or a matmul-shaped custom call; None for anything else."""
    if ins.opcode in MATMUL and len(ins.operands) >= 2:
        lhs, rhs = module.operand_shape(ins.operands[0]), module.operand_shape(ins.operands[1])
        if lhs is None or rhs is None or not lhs.is_array or not rhs.is_array:
            return None
        lb, lc = _dims(ins.attrs.get("lhs_batch_dims")), _dims(ins.attrs.get("lhs_contracting_dims"))
        rb, rc = _dims(ins.attrs.get("rhs_batch_dims")), _dims(ins.attrs.get("rhs_contracting_dims"))
        if any(d >= len(lhs.dims) for d in lb + lc) or any(d >= len(rhs.dims) for d in rb + rc):
            return None
        batch = math.prod(lhs.dims[d] for d in lb)
        k = math.prod(lhs.dims[d] for d in lc)
        m = math.prod(x for d, x in enumerate(lhs.dims) if d not in lb + lc)
        n = math.prod(x for d, x in enumerate(rhs.dims) if d not in rb + rc)
        return MatmulDims(batch, m, n, k)
    if ins.opcode == "convolution" and len(ins.operands) >= 2:
        lhs, out = module.operand_shape(ins.operands[0]), _first_array(ins.shape)
        labels = ins.attrs.get("dim_labels")
        if lhs is None or out is None or not isinstance(labels, tuple) or "f" not in labels[0] + labels[2]:
            return None
        groups = max(int(ins.attrs.get("feature_group_count", 1) or 1), 1)
        n_out = out.dims[labels[2].index("f")]
        return MatmulDims(groups, out.num_elements // max(n_out, 1), n_out // groups,
                          lhs.dims[labels[0].index("f")] // groups)
    if ins.opcode == "custom-call":
        from rooflens.cost.kernels import matmul_signature

        mm = matmul_signature(module, ins)
        return MatmulDims(mm.batch, mm.m, mm.n, mm.k) if mm is not None else None
    return None
