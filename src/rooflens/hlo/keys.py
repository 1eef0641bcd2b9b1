"""The attribute and header keys XLA prints, and how the parser reads each one's value."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rooflens.hlo import attrs as A
from rooflens.hlo.module import CALLED_KEYS

ATTR_PARSERS: dict[str, Callable[[str], Any]] = {
    "replica_groups": A.parse_replica_groups,
    "source_target_pairs": A.parse_pairs,
    "sharding": A.parse_sharding,
    "metadata": A.parse_key_values,
    "frontend_attributes": A.parse_key_values,
    "window": A.parse_window,
    "slice": A.parse_slice,
    "padding": A.parse_padding,
    "dim_labels": A.parse_dim_labels,
    "backend_config": str,  # kept raw (JSON on TPU/GPU); see Instruction.backend_config_json
    "origin": str,
    "original_value": str,
    "statistics": str,
    "operand_layout_constraints": str,
    "output_to_operand_aliasing": str,
    "control-predecessors": A.parse_computation_list,
    "custom_call_target": A.unquote,
    "custom_call_schedule": str,
    "api_version": str,
    "kind": str,
    "direction": str,
    "order": str,  # compare's total order for floats (order=TOTAL), printed by XLA from jaxlib 0.11
    "type": str,
    "distribution": str,
    "fft_type": str,
    "algorithm": str,
    "operand_precision": str,
    "precision_config": str,
    "result_accuracy": str,
    "execution_thread": A.unquote,
    "async_execution_thread": A.unquote,
    "schedule": str,
    "infeed_config": A.unquote,
    "outfeed_config": A.unquote,
    "outfeed_shape": str,
    "mode": str,
    "sparsity": str,
    "split_config": str,
}
for _k in CALLED_KEYS:
    ATTR_PARSERS[_k] = A.parse_computation_list

# Keys with plain values (ints, bools, int lists) that XLA prints; parsed generically.
GENERIC_KEYS = frozenset("""
channel_id use_global_device_ids constrain_layout dimensions index iota_dimension
lhs_contracting_dims rhs_contracting_dims lhs_batch_dims rhs_batch_dims lhs_ragged_dims
rhs_group_dims feature_group_count batch_group_count dynamic_slice_sizes offset_dims
collapsed_slice_dims start_index_map index_vector_dim slice_sizes indices_are_sorted
update_window_dims inserted_window_dims scatter_dims_to_operand_dims unique_indices
operand_batching_dims start_indices_batching_dims input_batching_dims
scatter_indices_batching_dims is_stable k largest exponent_bits mantissa_bits fft_length
is_host_transfer custom_call_has_side_effect split_dimension split_count concat_dimension
left_side lower transpose_a unit_diagonal epsilon feature_index cross_program_prefetch_index
is_cross_program_prefetch async_group_id wait_on_operation_queues known_trip_count
rng_algorithm
""".split())

KNOWN_HEADER_KEYS = frozenset("""
is_scheduled entry_computation_layout input_output_alias buffer_donor alias_passthrough_params
allow_spmd_sharding_propagation_to_parameters allow_spmd_sharding_propagation_to_output
num_partitions replica_count frontend_attributes spmd_output_sharding spmd_parameters_shardings
use_auto_spmd_partitioning launch_bounds cross_program_prefetches static_device_assignment
""".split())
