"""Regenerate the example HLO shipped with rooflens (`rooflens hlo --example`).

    python tools/make_example_hlo.py

Compiles the built-in transformer training step on 8 virtual CPU devices with a (4, 2)
(data, model) mesh and writes the optimized HLO text into src/rooflens/data/.
"""

import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from pathlib import Path  # noqa: E402

from rooflens.cli.common import EXAMPLE_HLO  # noqa: E402
from rooflens.workloads import TransformerConfig, make_mesh, sharded_train_step  # noqa: E402

cfg = TransformerConfig()
step, args = sharded_train_step(cfg, make_mesh((4, 2)))
text = step.lower(*args).compile().as_text()
out = Path(__file__).resolve().parents[1] / "src" / "rooflens" / "data" / EXAMPLE_HLO
out.write_text(text)
print(f"wrote {out} ({len(text.splitlines())} lines)")
