"""Model-level planning: the scaling book's transformer, training and inference arithmetic on catalogue chips.

>>> m = rl.plan.model("llama2-13b")
>>> m.params.total, m.kv_bytes_per_token("int8"), m.activation_bytes(batch_tokens=16e6, checkpoints_per_layer=3)
>>> rl.plan.train(m, chip="tpu-v5p", chips=4096, batch_tokens=3e6, mfu=0.4).step_time_s
>>> rl.plan.decode(m, chip="tpu-v5e", chips=8, batch=240, context=8192).tokens_per_s
"""

from rooflens.plan.check import PlanCheck, check_plan
from rooflens.plan.decode import DecodePlan, decode
from rooflens.plan.model import ParamCount, Transformer, dtype_bytes
from rooflens.plan.presets import PRESETS, load_config, model, names, workload_transformer
from rooflens.plan.train import StrategyPlan, TrainPlan, train

__all__ = ["PRESETS", "DecodePlan", "ParamCount", "PlanCheck", "StrategyPlan", "TrainPlan", "Transformer",
           "check_plan", "decode", "dtype_bytes", "load_config", "model", "names", "train", "workload_transformer"]
