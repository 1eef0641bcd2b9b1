"""Custom kernels priced: the cost a kernel carries, or a formula for the kernels people use.

A custom call is opaque to XLA's cost analysis, so a profile full of attention kernels would
otherwise be "unpriced". This module prices the ones it recognises, each with its source:

* a Pallas kernel's own ``CostEstimate`` (``backend_config.custom_call_config.cost_estimate``
  with ``flops``, ``transcendentals``, ``bytes_accessed``; jax ``jax/_src/tpu_custom_call.py``);
* attention: cuDNN fMHA (``__cudnn$fmha*``), TransformerEngine fused attention
  (``te_fused_attn_{forward,backward}_ffi``), Pallas flash/splash attention, and ragged/paged
  attention, whose sequence lengths are runtime data: there the roofline is a *lower bound*
  (the least work and traffic the call's shapes allow) and says so;
* GEMM-like library calls (cuBLAS/hipBLASLt ``__cublas$gemm``, ``__cublas$lt$matmul``): their FLOPs
  are counted in :mod:`rooflens.cost.counts`; here only their bytes, without the scratch workspace;
* the grouped GEMM of MoE experts (``__cublas$lt$groupedMatmul``, XLA's lowering of ``ragged_dot`` on
  CUDA and on ROCm, where hipBLASLt runs it under the same name): FLOPs here, exact when the
  group sizes (runtime data) cover the ragged dimension, an upper bound otherwise;
* any other custom call whose operands and result have a matmul's signature (``[B…, M, K] × [B…, K, N]
  → [B…, M, N]``, the weight possibly ``[N, K]`` or shared over the batch, with small extra operands
  such as per-channel or per-block scales): a Pallas quantized matmul (vLLM TPU's
  ``quantized_matmul_kernel``: ``bf16[1024,5120] custom-call(bf16[1024,5120], f4e2m1fn[5120,5120],
  f32[10,1,5120])``) is priced as the matmul its shapes say, at the activation dtype's matrix-unit
  rate, with the bytes of its real (int8, fp8, fp4) operands; its bound is ``inferred`` (from shapes).

Bytes of every recognised kernel are what it reads and writes in device memory: its operands and
its results, without the trailing ``u8``/``s8`` workspace buffer a library call returns (scratch,
XLA ``xla/service/gpu/cublas_cudnn.h``: the last tuple element of a GEMM or fMHA custom call).

:func:`kernel_cost` is a pure function of one instruction; ``REGISTRY`` lists (name, test,
formula) in the order they are tried.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from rooflens.hlo import Instruction, Module, Shape
from rooflens.units import fmt_bytes, fmt_g

#: exact: the formula is the work; lower: the least the shapes allow (lengths are runtime data);
#: estimate: the kernel author's own figure; inferred: the work its operand and result shapes imply (a
#: matmul's signature), the kernel's own code unseen
Bound = Literal["exact", "lower", "estimate", "inferred"]


@dataclass(frozen=True)
class KernelCost:
    kernel: str  # what the call was recognised as
    flops: float
    transcendentals: float
    read_bytes: float
    written_bytes: float
    model_flops: float  # the matmul-like part (MFU counts it)
    flops_formula: str
    bytes_formula: str
    bound: Bound = "exact"
    note: str = ""  # which bound, and why
    dtype: str = ""  # the dtype its math runs in, when the call says (a matmul's activation); "" otherwise


def _hbm(shape: Shape | None) -> float:
    from rooflens.cost.traffic import hbm_bytes

    return hbm_bytes(shape)


def _fmt(x: float) -> str:
    return fmt_g(x)


def _target(ins: Instruction) -> str:
    return (ins.custom_call_target or "").lower()


def _outputs(ins: Instruction) -> list[Shape]:
    """The call's results, without a trailing 1-D u8/s8 workspace (library scratch)."""
    leaves = list(ins.shape.tuple_shapes) if ins.shape.is_tuple else [ins.shape]
    if len(leaves) > 1 and leaves[-1].is_array and leaves[-1].dtype in ("u8", "s8") and len(leaves[-1].dims) == 1:
        leaves = leaves[:-1]
    return leaves


def _operand_shapes(module: Module, ins: Instruction) -> list[Shape]:
    return [s for o in ins.operands if (s := module.operand_shape(o)) is not None]


def io_bytes(module: Module, ins: Instruction) -> tuple[float, float, str]:
    """(read, written, formula): every operand read once, every result but the workspace written once."""
    r = sum(_hbm(s) for s in _operand_shapes(module, ins))
    w = sum(_hbm(s) for s in _outputs(ins))
    dropped = " (workspace not counted)" if len(_outputs(ins)) < (len(ins.shape.tuple_shapes) or 1) else ""
    return r, w, f"{fmt_bytes(r)} read ({len(ins.operands)} operands) + {fmt_bytes(w)} written{dropped}"


# -- a kernel's own estimate ----------------------------------------------------------------------

def _cost_estimate(ins: Instruction) -> dict | None:
    cfg = ins.backend_config_json() or {}
    est = (cfg.get("custom_call_config") or {}).get("cost_estimate") if isinstance(cfg, dict) else None
    return est if isinstance(est, dict) and any(est.get(k) for k in ("flops", "bytes_accessed")) else None


def pallas_estimate(module: Module, ins: Instruction) -> KernelCost | None:
    """The Pallas kernel's ``CostEstimate`` (jax ``pallas_call(cost_estimate=…)``, serialised by
    ``jax/_src/tpu_custom_call.py`` into ``custom_call_config.cost_estimate``). An attention kernel's or
    a matmul-shaped one's FLOPs are matrix-unit work (model FLOPs), at the activation's dtype."""
    est = _cost_estimate(ins) or {}
    flops, trans, nbytes = (float(est.get(k) or 0) for k in ("flops", "transcendentals", "bytes_accessed"))
    mm = matmul_signature(module, ins)
    matrix = _is_attention_name(ins) or mm is not None
    return KernelCost(
        "pallas cost estimate", flops, trans, nbytes, 0.0, flops if matrix else 0.0,
        f"{_fmt(flops)} (the kernel's own CostEstimate)", f"{fmt_bytes(nbytes)} (the kernel's own CostEstimate)",
        "estimate", "the kernel author's CostEstimate, as the program carries it", mm.dtype if mm else "")


# -- a matmul's signature -------------------------------------------------------------------------

#: an extra operand of a matmul-shaped call (a scale, a zero point, a block's absolute max) holds at most
#: this share of the weight's elements; a second operand as large as the weight is not a scale
SCALE_SHARE = 1 / 8


@dataclass(frozen=True)
class MatmulShape:
    """What a call's shapes say when they are a matmul's: ``[B…, M, K] × [B…, K, N] → [B…, M, N]``."""

    batch: int  # product of the batch dims (1 when none)
    m: int
    n: int
    k: int
    activation: int  # operand index of [B…, M, K]
    weight: int  # operand index of the weight
    weight_transposed: bool  # the weight is [N, K] (out features first, as vLLM stores it)
    extra: tuple[int, ...]  # the other operands (scales, zero points)
    dtype: str  # the activation's dtype: the matrix unit's rate
    weight_dtype: str

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k


def _matmul_pair(r: Shape, ops: list[Shape], i: int, j: int) -> tuple[int, bool] | None:
    """(K, weight transposed) when operand ``i`` is ``[B…, M, K]`` and ``j`` the weight of result ``r``."""
    a, w = ops[i], ops[j]
    if len(a.dims) != len(r.dims) or a.dims[:-1] != r.dims[:-1]:
        return None
    k, n = a.dims[-1], r.dims[-1]
    if k < 2 or len(w.dims) not in (2, len(r.dims)) or (len(w.dims) > 2 and w.dims[:-2] != r.dims[:-2]):
        return None
    if tuple(w.dims[-2:]) == (k, n):
        return k, False
    if tuple(w.dims[-2:]) == (n, k):
        return k, True
    return None


def matmul_signature(module: Module, ins: Instruction) -> MatmulShape | None:
    """The matmul a custom call's operand and result shapes describe, or None.

    One array result ``[B…, M, N]`` (a trailing library workspace aside); one operand ``[B…, M, K]``
    (the activation), one ``[B…, K, N]``, ``[K, N]`` or the transposed ``[N, K]`` (the weight, any dtype:
    int8, fp8, fp4), and every other operand small beside the weight (≤ 1/8 of its elements: per-channel
    or per-block scales, zero points). Where several pairings fit, the first operand that can be the
    activation is taken (calls pass the activation first)."""
    if ins.opcode != "custom-call":
        return None
    outs = [s for s in _outputs(ins) if s.is_array]
    if len(outs) != 1 or len(outs[0].dims) < 2 or len(ins.operands) < 2:
        return None
    r = outs[0]
    ops = [module.operand_shape(o) for o in ins.operands]
    if any(s is None or not s.is_array for s in ops):
        return None
    for i in range(len(ops)):
        for j in range(len(ops)):
            if i == j or (found := _matmul_pair(r, ops, i, j)) is None:
                continue
            k, transposed = found
            extra = tuple(x for x in range(len(ops)) if x not in (i, j))
            if any(ops[x].num_elements > max(ops[j].num_elements * SCALE_SHARE, 1) for x in extra):
                continue
            batch = math.prod(r.dims[:-2])
            return MatmulShape(batch, r.dims[-2], r.dims[-1], k, i, j, transposed, extra, ops[i].dtype, ops[j].dtype)
    return None


def matmul_shaped(module: Module, ins: Instruction) -> KernelCost | None:
    """A custom call priced as the matmul its shapes describe (:func:`matmul_signature`): FLOPs
    2·B·M·N·K, bytes of its operands and result in their own dtypes, the activation's dtype for the rate."""
    mm = matmul_signature(module, ins)
    if mm is None:
        return None
    r, w, bf = io_bytes(module, ins)
    ops = _operand_shapes(module, ins)
    weight = "ᵀ" if mm.weight_transposed else ""
    batch = f"{mm.batch}·" if mm.batch > 1 else ""
    formula = (f"inferred from shapes, a matmul: {ops[mm.activation].dtype}[{batch}{mm.m}×{mm.k}] × "
               f"{ops[mm.weight].dtype}[{mm.k}×{mm.n}]{weight} → 2·{batch}{mm.m}·{mm.n}·{mm.k} = {_fmt(mm.flops)}")
    scales = ", ".join(f"{ops[x].dtype}[{','.join(map(str, ops[x].dims))}]" for x in mm.extra)
    note = ("inferred from shapes: the operands and result have a matmul's signature"
            + (f" (extra operands {scales}: scales or zero points, read once)" if scales else "")
            + f"; priced at the {mm.dtype} matrix rate")
    return KernelCost("matmul-shaped custom call", mm.flops, 0.0, r, w, mm.flops, formula, bf, "inferred", note,
                      mm.dtype)


# -- attention ------------------------------------------------------------------------------------

_ATTN_NAME = re.compile(r"flash|splash|attention|attn|fmha|mha|\brpa\b|rpa-", re.I)
_PAGED_NAME = re.compile(r"ragged_paged_attention|paged_attention|\brpa\b|rpa-", re.I)


def _is_attention_name(ins: Instruction) -> bool:
    return bool(_ATTN_NAME.search(f"{ins.name} {ins.op_name}"))


def _attention_flops(b: float, hq: float, sq: float, skv: float, d: float, dv: float) -> float:
    # Q·Kᵀ then P·V: 2·B·H·Sq·Skv·D + 2·B·H·Sq·Skv·Dv (FlashAttention-2, Dao 2023, §4.1 counts
    # 4·seqlen²·head_dim·heads for the forward pass)
    return 2.0 * b * hq * sq * skv * (d + dv)


#: backward = 2.5 × forward: five matmuls instead of two (FlashAttention-2, Dao 2023, §4.1)
BACKWARD_FACTOR = 2.5
#: a causal mask skips the upper triangle: half the score matrix (FlashAttention-2, §3.1.1)
CAUSAL_FACTOR = 0.5


def _attention(name: str, module: Module, ins: Instruction, dims: tuple[float, ...], backward: bool,
               causal: bool, bound: Bound = "exact", note: str = "") -> KernelCost:
    b, hq, sq, skv, d, dv = dims
    fwd = _attention_flops(b, hq, sq, skv, d, dv)
    factor = (BACKWARD_FACTOR if backward else 1.0) * (CAUSAL_FACTOR if causal else 1.0)
    flops = fwd * factor
    # the softmax's exp per score element (forward; the backward recomputes it)
    trans = b * hq * sq * skv * (CAUSAL_FACTOR if causal else 1.0) * (2.0 if backward else 1.0)
    r, w, bf = io_bytes(module, ins)
    words = (f"attention {'backward' if backward else 'forward'}: 2·B·H·Sq·Skv·(D+Dv) = 2·{b:g}·{hq:g}·{sq:g}·"
             f"{skv:g}·({d:g}+{dv:g})" + (f" × {BACKWARD_FACTOR:g} (backward)" if backward else "")
             + (f" × {CAUSAL_FACTOR:g} (causal)" if causal else "") + f" = {_fmt(flops)}")
    return KernelCost(name, flops, trans, r, w, flops, words, bf, bound, note)


def _mask_causal(ins: Instruction) -> bool:
    cfg = ins.backend_config_json() or {}
    fmha = cfg.get("cudnn_fmha_backend_config") or {}
    text = ins.raw_attrs.get("backend_config", "") or ""
    if str(fmha.get("mask_type", "")).upper() == "CAUSAL" or fmha.get("is_causal_mask"):
        return True
    m = re.search(r"attn_mask_type\s*=\s*(\d+)", text)  # TE's NVTE_Mask_Type: 2–5 are the causal kinds
    return bool(m and int(m.group(1)) in (2, 3, 4, 5))


def cudnn_fmha(module: Module, ins: Instruction) -> KernelCost | None:
    """cuDNN fused MHA (``__cudnn$fmha*``, XLA ``xla/service/gpu/cublas_cudnn.h``): B, H, Sq, Skv
    from ``intermediate_tensor_shape`` (the score matrix), D and Dv from Q's and V's minor dim."""
    cfg = (ins.backend_config_json() or {}).get("cudnn_fmha_backend_config") or {}
    ops = _operand_shapes(module, ins)
    inter = [int(x) for x in (cfg.get("intermediate_tensor_shape") or {}).get("dimensions", [])]
    if len(ops) < 3 or len(inter) != 4:
        return None
    b, h, sq, skv = inter
    d, dv = ops[0].dims[-1], ops[2].dims[-1]
    backward = "backward" in _target(ins)
    return _attention("cudnn fmha", module, ins, (b, h, sq, skv, d, dv), backward, _mask_causal(ins))


def te_fused_attention(module: Module, ins: Instruction) -> KernelCost | None:
    """TransformerEngine fused attention (``te_fused_attn_{forward,backward}_ffi``). Operands start
    q, k, v (TE ``transformer_engine/jax/cpp_extensions/attention.py``, ``parse_qkv_aval``): BSHD
    ``[…, S, H, D]``, KV-packed ``k = […, S, 2, Hkv, D]``, QKV-packed ``q = […, S, 3, H, D]``."""
    ops = _operand_shapes(module, ins)
    if len(ops) < 3 or len(ops[0].dims) < 3:
        return None
    q, k, v = ops[0].dims, ops[1].dims, ops[2].dims
    if len(q) >= 5 and q[-3] == 3:  # QKV packed
        b, sq, hq, d = math.prod(q[:-4]), q[-4], q[-2], q[-1]
        skv, dv = sq, d
    elif len(k) >= 5 and k[-3] == 2:  # KV packed
        b, sq, hq, d = math.prod(q[:-3]), q[-3], q[-2], q[-1]
        skv, dv = k[-4], k[-1]
    else:
        b, sq, hq, d = math.prod(q[:-3]), q[-3], q[-2], q[-1]
        skv, dv = k[-3], v[-1]
    backward = "backward" in _target(ins) or "bwd" in _target(ins)
    return _attention("te fused attention", module, ins, (b, hq, sq, skv, d, dv), backward, _mask_causal(ins))


def pallas_attention(module: Module, ins: Instruction) -> KernelCost | None:
    """Pallas flash/splash attention without a CostEstimate (jax ``pallas/ops/tpu/flash_attention.py``,
    ``splash_attention``): q, k, v are ``[B, H, S, D]``. A splash mask skips blocks the call does
    not show: the dense count is then an upper bound of the work, and the bytes are exact."""
    ops = [s for s in _operand_shapes(module, ins) if s.is_array and len(s.dims) == 4 and s.dtype[0] in "bf"]
    if len(ops) < 3:
        return None
    q, k, v = ops[0].dims, ops[1].dims, ops[2].dims
    splash = "splash" in f"{ins.name} {ins.op_name}".lower()
    return _attention("pallas flash attention", module, ins, (q[0], q[1], q[2], k[2], q[3], v[3]),
                      "bwd" in f"{ins.name} {ins.op_name}".lower(), False,
                      "estimate" if splash else "exact", "dense count; the splash mask's skipped blocks are not "
                      "visible in the call" if splash else "")


def ragged_paged_attention(module: Module, ins: Instruction) -> KernelCost | None:
    """Ragged paged attention (vLLM TPU ``tpu_inference/kernels/ragged_paged_attention``): operands
    are int32 metadata (sequence lengths, page indices, cumulative query lengths), then the queries,
    the new keys/values and the paged KV cache ``[pages, page_size, …, head_dim]``, which the call
    updates in place (``output_to_operand_aliasing``). Which KV tokens each query attends to are
    runtime data, so the roofline is the *lower bound*: every query attends to at least its own new
    token, the queries and new KV are read, the output and the new KV written; the KV cache reads
    (up to the whole cache) are not counted."""
    floats = [(k, s) for k, s in enumerate(_operand_shapes(module, ins)) if s.is_array and s.dtype[0] in "bf"]
    if len(floats) < 2:
        return None
    cache_k, cache = max(floats, key=lambda ks: ks[1].num_elements)
    rest = [s for k, s in floats if k != cache_k]
    q = rest[0]
    d = q.dims[-1]
    q_rows = q.num_elements / d  # (token, query head) pairs, the packed padding included
    new_kv = sum(_hbm(s) for s in rest[1:])
    flops = 4.0 * q_rows * d  # Q·Kᵀ and P·V against one KV token each
    outputs = [s for s in _outputs(ins) if s.num_elements != cache.num_elements]
    r = _hbm(q) + new_kv
    w = sum(_hbm(s) for s in outputs) + new_kv
    up = _hbm(cache)
    return KernelCost(
        "ragged paged attention", flops, q_rows, r, w, flops,
        f"lower bound: 4 × {q_rows:g} query rows × {d} (each query against ≥ 1 KV token) = {_fmt(flops)}",
        f"lower bound: {fmt_bytes(r)} read (queries, new KV) + {fmt_bytes(w)} written (output, new KV into the "
        f"cache); the KV cache reads, up to {fmt_bytes(up)}, depend on runtime sequence lengths",
        "lower", f"KV lengths are runtime data: the roofline is a lower bound (the cache read is between 0 and "
                 f"{fmt_bytes(up)})")


def gemm_bytes(module: Module, ins: Instruction) -> KernelCost | None:
    """cuBLAS/hipBLASLt GEMMs: FLOPs from :mod:`rooflens.cost.counts`; bytes without the workspace."""
    from rooflens.cost.counts import custom_call_counts

    c = custom_call_counts(module, ins)
    r, w, bf = io_bytes(module, ins)
    return KernelCost("library gemm", c.flops, 0.0, r, w, c.flops, c.formula, bf)


# -- grouped GEMM (MoE experts) -------------------------------------------------------------------

_GROUPED_NOTE = ("group sizes are runtime data: the FLOPs are exact when they sum to the ragged dimension (every "
                 "token row in one group), an upper bound otherwise; every group's weights are counted as read, "
                 "an upper bound when groups are empty")


def _grouped(module: Module, ins: Instruction, groups: int, k: float, ragged_contracting: bool,
             what: str) -> KernelCost:
    """A grouped GEMM from its shapes: rows of the ragged dimension each meet one group's weights.

    Ragged in a non-contracting dimension (MoE forward, ``gmm``): ``out [M, N]``, FLOPs = 2·|out|·K, the
    dense count of the tokens against their own expert. Ragged in the contracting dimension (the weight
    gradient, ``tgmm``): ``out [G, K, N]`` sums over each group's rows only, FLOPs = 2·|out|·M / G
    (XLA ``RaggedDotDimensionNumbers``, ``xla/xla_data.proto``; jax ``lax.ragged_dot_general``)."""
    out = _outputs(ins)[0]
    groups = max(groups, 1)
    flops = 2.0 * out.num_elements * k / (groups if ragged_contracting else 1)
    dims = "·".join(str(d) for d in out.dims)
    formula = (f"grouped GEMM ({'ragged contracting' if ragged_contracting else 'ragged rows'}): 2 × {dims} "
               f"(output) × {k:g} (contracted)" + (f" / {groups} groups" if ragged_contracting else "")
               + f" = {_fmt(flops)}")
    r, w, bf = io_bytes(module, ins)
    return KernelCost(what, flops, 0.0, r, w, flops, formula, bf, "estimate", _GROUPED_NOTE)


def cublas_grouped_gemm(module: Module, ins: Instruction) -> KernelCost | None:
    """``__cublas$lt$groupedMatmul`` (cuBLASLt on CUDA, hipBLASLt on ROCm under the same name), XLA's lowering of
    ``ragged-dot``: operands lhs, rhs ``[G, …]``, group sizes; result (out, workspace). Dimension numbers in
    ``grouped_gemm_backend_config`` (``gemm_backend_config.dot_dimension_numbers`` and
    ``ragged_dot_dimension_numbers``; openxla/xla ``xla/service/gpu/backend_configs.proto``)."""
    cfg = (ins.backend_config_json() or {}).get("grouped_gemm_backend_config") or {}
    dnums = ((cfg.get("gemm_backend_config") or {}).get("dot_dimension_numbers")
             or (cfg.get("ragged_dot_dimension_numbers") or {}).get("dot_dimension_numbers") or {})
    ops = _operand_shapes(module, ins)
    contracting = [int(d) for d in dnums.get("lhs_contracting_dimensions", ())]
    if len(ops) < 3 or not contracting or any(d >= len(ops[0].dims) for d in contracting):
        return None
    ragged = [int(d) for d in (cfg.get("ragged_dot_dimension_numbers") or {}).get("lhs_ragged_dimensions", ())]
    k = math.prod(ops[0].dims[d] for d in contracting)
    groups = ops[2].dims[-1] if ops[2].dims else 1  # group sizes: s32[G] (or [batch, G])
    return _grouped(module, ins, groups, k, any(d in contracting for d in ragged), "grouped gemm")


# -- the registry ---------------------------------------------------------------------------------

def _t(*words: str) -> Callable[[Instruction], bool]:
    return lambda ins: any(w in _target(ins) for w in words)


#: (what, whether an instruction is one, its formula), tried in order
REGISTRY: tuple[tuple[str, Callable[[Instruction], bool], Callable[[Module, Instruction], KernelCost | None]], ...] = (
    ("pallas cost estimate", lambda ins: _cost_estimate(ins) is not None, pallas_estimate),
    ("cudnn fmha", _t("__cudnn$fmha"), cudnn_fmha),
    ("te fused attention", _t("te_fused_attn"), te_fused_attention),
    ("ragged paged attention", lambda ins: _target(ins) in ("tpu_custom_call", "mosaic_gpu")
     and bool(_PAGED_NAME.search(f"{ins.name} {ins.op_name}")), ragged_paged_attention),
    ("pallas flash attention", lambda ins: _target(ins) in ("tpu_custom_call", "mosaic_gpu", "__gpu$xla.gpu.triton")
     and _is_attention_name(ins), pallas_attention),
    ("grouped gemm", _t("groupedmatmul"), cublas_grouped_gemm),
    ("library gemm", _t("gemm", "matmul"), gemm_bytes),
    # (library convolutions are counted in rooflens.cost.counts; a host callback is Python on the host, no kernel)
    ("matmul-shaped custom call", lambda ins: not any(w in _target(ins) for w in ("conv", "callback"))
     and solver_routine(_target(ins)) is None, matmul_shaped),  # a triangular solve has a matmul's shapes
)


#: the factorizations and solves priced, by their LAPACK routine's name less its type letter
SOLVER_ROUTINES = ("potrf", "getrf", "geqrf", "orgqr", "ungqr", "trsm")


def solver_routine(target: str) -> str | None:
    """The LAPACK routine a library call's target runs (``lapack_spotrf_ffi`` → potrf, ``cusolver_getrf_ffi`` →
    getrf, ``hipsolver_geqrf_ffi``, cuBLAS's ``__cublas$triangularSolve`` → trsm), None for any other."""
    t = target.lower()
    if "triangularsolve" in t:
        return "trsm"
    for token in t.replace("$", "_").split("_"):
        for name in (token, token[1:] if token[:1] in "sdcz" else ""):
            if name in SOLVER_ROUTINES:
                return name
    return None


def is_host_callback(ins: Instruction | None) -> bool:
    """Whether a custom call hands values to Python on the host and waits for it: ``jax.debug.print``,
    ``jax.debug.callback``, ``io_callback`` and ``pure_callback`` lower to ``xla_python_cpu_callback`` /
    ``xla_ffi_python_cpu_callback`` (GPU: ``…_gpu_callback``). No kernel: the device stops for the host."""
    t = _target(ins) if ins is not None and ins.opcode == "custom-call" else ""
    return "python" in t and "callback" in t


def kernel_cost(module: Module, ins: Instruction) -> KernelCost | None:
    """The cost of one custom call, when it is a kernel this module knows (None otherwise)."""
    if ins.opcode != "custom-call":
        return None
    for _, test, formula in REGISTRY:
        if test(ins):
            kc = formula(module, ins)
            if kc is not None:
                return kc
    return None


@functools.lru_cache(maxsize=1 << 14)  # the chip's inference, its trust checks and the pricing each parse an op's line
def instruction_module(text: str) -> Module | None:
    """One instruction as a trace carries it (TPU ``long_name``, an XLA Ops event's metadata name)
    made a module of its own, so it can be priced with no program HLO. Its operands'
    shapes are printed inline; None when the text is not one instruction. Remembered by its text (a module
    is read, never changed, by its users)."""
    from rooflens.hlo import parse
    from rooflens.hlo.errors import HloParseError

    line = text.strip()
    if "\n" in line or " = " not in line:
        return None
    try:
        m = parse(f"HloModule from_trace\n\nENTRY from_trace {{\n  ROOT {line.removeprefix('ROOT ')}\n}}\n")
    except HloParseError:
        return None
    return m if len(m.instructions()) == 1 else None
