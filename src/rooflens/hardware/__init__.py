"""The hardware catalogue (cited numbers per JAX device) and local calibration.

>>> import rooflens as rl
>>> rl.chip("tpu-v5e").peak_flops_per_s["bf16"]
197000000000000.0
"""

from rooflens.hardware.catalog import (
    LOCAL_CHIP,
    Chip,
    ChipError,
    ChipTable,
    Figure,
    cache_dir,
    catalog,
    chip,
    chip_rows,
    chips,
    local_chip_path,
    read_catalog_file,
    read_catalog_text,
    shared_by,
)
from rooflens.hardware.infer import infer_chip

__all__ = [
    "LOCAL_CHIP", "Chip", "ChipError", "ChipTable", "Figure", "cache_dir", "catalog", "chip", "chip_rows",
    "chips", "infer_chip", "local_chip_path", "read_catalog_file", "read_catalog_text", "shared_by",
]
