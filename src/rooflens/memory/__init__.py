"""Memory: the model-state estimate, what XLA allocated, and what the device really held.

>>> rl.memory.estimate(7e9, optimizer="adam", param_dtype="bf16", grad_dtype="bf16", master_dtype="f32").total_bytes
112000000000.0
>>> rl.memory.read_run_memory(rl.load("logs"))   # -> MemorySummary (compiled peaks, peak buffers, snapshots)
"""

from rooflens.memory.compiled import CompiledMemory, PeakBuffer, compiled_memory, parse_peak, value_sizes
from rooflens.memory.estimate import MemoryEstimate, count_params, estimate
from rooflens.memory.pprof import MemorySnapshot, parse_snapshot
from rooflens.memory.summary import (
    PEAK_OVER_STATE,
    MemorySummary,
    SnapshotSummary,
    read_dump_memory,
    read_run_memory,
    summarize,
)

__all__ = ["PEAK_OVER_STATE", "CompiledMemory", "MemoryEstimate", "MemorySnapshot", "MemorySummary", "PeakBuffer",
           "SnapshotSummary", "compiled_memory", "count_params", "estimate", "parse_peak", "parse_snapshot",
           "read_dump_memory", "read_run_memory", "summarize", "value_sizes"]
