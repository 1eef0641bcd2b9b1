"""Memory: the model-state estimate, what XLA allocated, and what the device really held.

>>> rl.memory.estimate(7e9, optimizer="adam", param_dtype="bf16", grad_dtype="bf16", master_dtype="f32").total_bytes
112000000000.0
"""

from rooflens.memory.compiled import CompiledMemory, PeakBuffer, compiled_memory, parse_peak, value_sizes
from rooflens.memory.estimate import MemoryEstimate, count_params, estimate
from rooflens.memory.pprof import MemorySnapshot, parse_snapshot

__all__ = ["CompiledMemory", "MemoryEstimate", "MemorySnapshot", "PeakBuffer", "compiled_memory", "count_params",
           "estimate", "parse_peak", "parse_snapshot", "value_sizes"]
