"""The op event table as Parquet, for pandas / polars / DuckDB users.

One row per op execution (per kernel on GPU), in time order; the columns, their types and units are
documented in ``docs/export-schema.md``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rooflens.trace.profile import Profile
from rooflens.trace.stats import op_self_ps

EXPORT_FILE = "ops.parquet"


def op_table(profile: Profile):
    """The op events of ``profile`` as a ``pyarrow.Table`` (columns above)."""
    import pyarrow as pa

    t = profile.table
    pairs = t.pairs()
    info = profile.op_info
    n_names = len(t.names) + 1
    pair_key = pairs[:, 0] * n_names + pairs[:, 1]
    k = np.searchsorted(pair_key, t.program.astype(np.int64) * n_names + t.name)
    ops = [info.get((t.programs[p], t.names[n])) for p, n in pairs.tolist()]
    categories = [o.category if o else "unknown" for o in ops]
    scopes = [o.named_scope if o else "" for o in ops]

    def words(codes: np.ndarray, vocab: list[str]):
        return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(vocab, pa.string()))

    columns = {
        "host": words(t.host, t.hosts), "device": pa.array(t.device, pa.int32()), "line": words(t.line, t.lines),
        "program": words(t.program, t.programs), "op": words(t.name, t.names),
        "category": words(k, categories), "named_scope": words(k, scopes), "step": pa.array(t.step, pa.int32()),
        "start_ps": pa.array(t.start_ps, pa.int64()), "duration_ps": pa.array(t.dur_ps, pa.int64()),
        "self_ps": pa.array(op_self_ps(profile), pa.int64()),
    }
    meta = {"origin_ns": str(t.origin_ns), "platform": profile.platform, "device_kind": profile.device_kind,
            "sources": json.dumps(profile.sources)}
    return pa.table(columns).replace_schema_metadata({f"rooflens.{k}": v for k, v in meta.items()})


def write_parquet(profile: Profile, directory: str | Path) -> Path:
    """Write ``ops.parquet`` into ``directory`` (made if missing); returns its path."""
    import pyarrow.parquet as pq

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    out = d / EXPORT_FILE
    pq.write_table(op_table(profile), out, compression="zstd")
    return out
