"""HLO opcodes and the categories rooflens groups them into."""

from __future__ import annotations

# Opcodes of XLA's HLO (xla/hlo/ir/hlo_opcode.h), by category.
ELEMENTWISE = frozenset("""
abs acos acosh add and asin asinh atan atan2 atanh cbrt ceil clamp count-leading-zeros compare
complex convert cosine cosh divide erf exponential exponential-minus-one floor imag is-finite
log log-plus-one logistic maximum minimum mulhi multiply negate not or popcnt power real
reduce-precision remainder round-nearest-afz round-nearest-even rsqrt select shift-left
shift-right-arithmetic shift-right-logical sign sine sinh sqrt stochastic-convert subtract tan
tanh xor bitcast-convert map rng rng-bit-generator rng-get-and-update-state
""".split())
MATMUL = frozenset(["dot", "ragged-dot", "scaled-dot", "block-scaled-dot"])
CONVOLUTION = frozenset(["convolution"])
MODEL_FLOP_OPCODES = MATMUL | CONVOLUTION  # what MFU counts: the dots and convolutions
REDUCTION = frozenset(["reduce", "reduce-window", "select-and-scatter"])
DATA_MOVEMENT = frozenset("""
broadcast reshape dynamic-reshape slice dynamic-slice dynamic-update-slice concatenate pad
gather scatter reverse iota sort topk shuffle
""".split())
COPY = frozenset(["copy", "copy-start", "copy-done", "transpose"])
COLLECTIVE = frozenset("""
all-gather all-gather-start all-gather-done all-reduce all-reduce-start all-reduce-done
reduce-scatter all-to-all ragged-all-to-all collective-permute collective-permute-start
collective-permute-done collective-broadcast collective-reduce send send-done recv recv-done
reduce-scatter-start reduce-scatter-done all-to-all-start all-to-all-done
""".split())  # (the last four: XLA's printed form of an async-start/-done wrapping the collective)
CONTROL = frozenset("""
while conditional call async-start async-update async-done tuple get-tuple-element parameter
constant after-all add-dependency domain opt-barrier partition-id replica-id bitcast
get-dimension-size set-dimension-size scan
""".split())
HOST = frozenset(["infeed", "outfeed"])
FFT = frozenset(["fft"])
LINEAR_ALGEBRA = frozenset(["cholesky", "triangular-solve"])
OTHER = frozenset("""
fusion custom-call batch-norm-grad batch-norm-inference batch-norm-training
""".split())

KNOWN_OPCODES = (
    ELEMENTWISE | MATMUL | CONVOLUTION | REDUCTION | DATA_MOVEMENT | COPY | COLLECTIVE | CONTROL
    | HOST | FFT | LINEAR_ALGEBRA | OTHER
)

# Collectives that move data between devices (the "-done" halves only wait).
COLLECTIVE_KINDS = {
    "all-gather": "all-gather", "all-gather-start": "all-gather",
    "all-reduce": "all-reduce", "all-reduce-start": "all-reduce",
    "reduce-scatter": "reduce-scatter", "reduce-scatter-start": "reduce-scatter",
    "all-to-all": "all-to-all", "all-to-all-start": "all-to-all", "ragged-all-to-all": "all-to-all",
    "collective-permute": "collective-permute", "collective-permute-start": "collective-permute",
    "collective-broadcast": "collective-broadcast", "collective-reduce": "all-reduce",
    "send": "send", "recv": "recv",
}

# Category names, in the order summaries show them.
CATEGORIES = (
    "matmul", "attention", "convolution", "fft", "linear algebra", "fusion", "collective", "copy/transpose",
    "elementwise", "reduction", "data movement", "custom-call", "host transfer", "control", "other", "unknown",
)

#: fused attention kernels XLA calls (cuDNN's ``__cudnn$fmha…``, TransformerEngine's ``te_fused_attn_…_ffi``, flash
#: attention libraries): before the GEMM targets, as cuDNN's fMHA target names no GEMM but others could
_ATTENTION_TARGETS = ("fmha", "fused_attn", "flash_attn", "flash_attention", "splash_attention")
_GEMM_TARGETS = ("gemm", "matmul", "cublas", "dot")
_CONV_TARGETS = ("conv",)
#: dense linear algebra the solvers' libraries run (LAPACK on a CPU, cuSOLVER/hipSOLVER on a GPU: jnp.linalg's
#: Cholesky, LU, QR, eigen- and singular-value decompositions)
_LINALG_TARGETS = ("lapack", "cusolver", "hipsolver", "potrf", "getrf", "geqrf", "syevd", "gesvd", "gesdd", "trsm")


def opcode_category(opcode: str, custom_call_target: str | None = None) -> str:
    """Category of a single (non-fusion) opcode."""
    if opcode in MATMUL:
        return "matmul"
    if opcode in CONVOLUTION:
        return "convolution"
    if opcode in FFT:
        return "fft"
    if opcode in LINEAR_ALGEBRA:
        return "linear algebra"
    if opcode in COLLECTIVE:
        return "collective"
    if opcode in COPY:
        return "copy/transpose"
    if opcode in ELEMENTWISE:
        return "elementwise"
    if opcode in REDUCTION:
        return "reduction"
    if opcode in DATA_MOVEMENT:
        return "data movement"
    if opcode in CONTROL:
        return "control"
    if opcode in HOST:
        return "host transfer"
    if opcode == "custom-call":
        t = (custom_call_target or "").lower()
        if any(k in t for k in _ATTENTION_TARGETS):
            return "attention"
        if any(k in t for k in _GEMM_TARGETS):
            return "matmul"
        if any(k in t for k in _CONV_TARGETS):
            return "convolution"
        if any(k in t for k in _LINALG_TARGETS):
            return "linear algebra"
        return "custom-call"
    if opcode == "fusion":
        return "fusion"
    if opcode in OTHER:
        return "other"
    return "unknown"


# What an opcode computes, in a phrase (for `rooflens hlo --op`).
DESCRIPTIONS = {
    "dot": "a matrix multiply (dot product over the contracting dimensions)",
    "convolution": "a convolution",
    "fusion": "a fusion: several ops compiled into one kernel that reads its operands once and writes its result once",
    "all-reduce": "an all-reduce: every device in a group ends with the sum (or other reduction) of the group's inputs",
    "all-reduce-start": "the start of an asynchronous all-reduce",
    "all-reduce-done": "the wait for an asynchronous all-reduce",
    "all-gather": "an all-gather: every device in a group ends with the concatenation of all the group's shards",
    "all-gather-start": "the start of an asynchronous all-gather",
    "all-gather-done": "the wait for an asynchronous all-gather",
    "reduce-scatter": "a reduce-scatter: the group's inputs are summed and each device keeps one shard of the result",
    "all-to-all": "an all-to-all: each device sends a different slice to every other device in its group",
    "collective-permute": "a collective-permute: each device sends its buffer to another (source→target pairs)",
    "collective-permute-start": "the start of an asynchronous collective-permute",
    "collective-permute-done": "the wait for an asynchronous collective-permute",
    "copy": "a copy, usually to change layout or tiling (a retile) or memory space",
    "copy-start": "the start of an asynchronous copy (often between memory spaces, e.g. host offload)",
    "copy-done": "the wait for an asynchronous copy",
    "transpose": "a transpose (permutes dimensions in memory)",
    "bitcast": "a bitcast: reinterprets the same bytes with another shape (free, no data moves)",
    "bitcast-convert": "a bitcast-convert: reinterprets each element's bits as another type",
    "convert": "an element type conversion",
    "reduce": "a reduction over some dimensions",
    "reduce-window": "a windowed reduction (pooling)",
    "broadcast": "a broadcast to a larger shape",
    "reshape": "a reshape",
    "slice": "a static slice",
    "dynamic-slice": "a slice at run-time offsets (e.g. an embedding lookup or a loop index)",
    "dynamic-update-slice": "an in-place update of a slice at run-time offsets",
    "concatenate": "a concatenation",
    "pad": "padding with a constant",
    "gather": "a gather (indexed reads)",
    "scatter": "a scatter (indexed writes/accumulation)",
    "while": "a while loop: runs its body computation until the condition computation is false",
    "conditional": "a conditional: runs one of its branch computations",
    "call": "a call of another computation",
    "async-start": "the start of an asynchronous operation wrapping another computation",
    "async-done": "the wait for an asynchronous operation",
    "custom-call": "a custom call into a library kernel or runtime function",
    "parameter": "an input of the computation",
    "constant": "a constant",
    "tuple": "a tuple of several values (no data moves)",
    "get-tuple-element": "one element of a tuple (no data moves)",
    "iota": "an array filled with 0, 1, 2, … along one dimension",
    "sort": "a sort",
    "select": "an elementwise choice between two arrays",
    "compare": "an elementwise comparison",
}


def describe_opcode(opcode: str) -> str:
    if opcode in DESCRIPTIONS:
        return DESCRIPTIONS[opcode]
    if opcode in ELEMENTWISE:
        return f"an elementwise {opcode}"
    return f"a {opcode} op"
