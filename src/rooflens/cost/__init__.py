"""The cost model: per-op FLOPs, bytes and collective traffic, and roofline times on a chip.

>>> import rooflens as rl
>>> pred = rl.cost.predict_module(rl.hlo.parse(text), rl.chip("tpu-v5e"))
>>> pred.time_s, pred.top(5)
"""

from rooflens.cost.comm import CommCost, collective_cost
from rooflens.cost.counts import Counts, instruction_counts
from rooflens.cost.model import OpCost, OpPrediction, Prediction, costs, peak_for, predict_module, price, trip_count
from rooflens.cost.traffic import Traffic, hbm_bytes, instruction_traffic

__all__ = [
    "CommCost", "Counts", "OpCost", "OpPrediction", "Prediction", "Traffic", "collective_cost", "costs",
    "hbm_bytes", "instruction_counts", "instruction_traffic", "peak_for", "predict_module", "price", "trip_count",
]
