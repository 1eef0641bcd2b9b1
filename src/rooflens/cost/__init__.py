"""The cost model: per-op FLOPs, bytes and collective traffic, and roofline times on a chip.

>>> import rooflens as rl
>>> pred = rl.cost.predict_module(rl.hlo.parse(text), rl.chip("tpu-v5e"))
>>> pred.time_s, pred.top(5)
"""

from rooflens.cost.comm import CommCost, Span, Topology, collective_cost, group_span, place_group
from rooflens.cost.counts import Counts, instruction_counts, model_flops
from rooflens.cost.model import OpCost, OpPrediction, Prediction, costs, peak_for, predict_module, price, trip_count
from rooflens.cost.traffic import Traffic, hbm_bytes, instruction_traffic

__all__ = [
    "CommCost", "Counts", "OpCost", "OpPrediction", "Prediction", "Span", "Topology", "Traffic", "collective_cost",
    "costs", "group_span", "hbm_bytes", "instruction_counts", "instruction_traffic", "model_flops", "peak_for",
    "place_group", "predict_module", "price", "trip_count",
]
