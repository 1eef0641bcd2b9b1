"""An nsys-jax archive (a zip, or its extracted directory) and what it holds besides the ranges: the
GPU's properties, the host's name, and the HLO protos XLA dumped (see :mod:`.reader` for the format)."""

from __future__ import annotations

import io
import lzma
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from rooflens.errors import RooflensError
from rooflens.trace.formats.raw import hlo_module_of

TRACE = "nvtx_gpu_proj_trace/trace.parquet"
DEVICE_METADATA = "device-metadata.parquet"
SYSTEM_METADATA = "system-metadata.parquet"
HOST_RANGES = "report_nvtx_pushpop_trace.csv.xz"  # the host-side NVTX ranges (compilation included)
_DUMP = re.compile(r"(?:^|/)dump/module_(\d+)\.([^/]+?)\.([^./]*(?:\.\d+)?[^./]*)\.hlo\.pb\.xz$")
_XLA_DEVICE = re.compile(r"Xla:#.*?global=(\d+).*?process=(\d+)")
#: HLO opcodes whose GPU thunk launches an NCCL kernel on a stream of its own: it overlaps compute
COMPUTE_LINE, COLLECTIVE_LINE = "GPU ops (NVTX projected)", "NCCL collectives (NVTX projected)"


# -- the archive ----------------------------------------------------------------------------------

class Archive:
    """The members of an nsys-jax archive, zipped or extracted, by their path inside it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip: zipfile.ZipFile | None = None
        try:
            if path.is_dir():
                if not (path / TRACE).is_file():
                    raise RooflensError(f"{path} is not an nsys-jax archive: it holds no {TRACE}.")
                self.prefix = ""
                self.root = path
                self.names = [p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()]
            else:
                if not zipfile.is_zipfile(path):
                    with path.open("rb") as fh:
                        head = fh.read(4)
                    if head == b"PK\x03\x04":  # a zip's first member, but no directory at its end
                        raise RooflensError(f"{path} is a truncated zip archive (its central directory is missing).")
                    raise RooflensError(f"{path} is not a zip archive (an nsys-jax archive is one).")
                self._zip = zipfile.ZipFile(path)
                every = self._zip.namelist()
                hit = next((n for n in every if n == TRACE or n.endswith("/" + TRACE)), None)
                if hit is None:
                    raise RooflensError(f"{path} is a zip archive without {TRACE}: not an nsys-jax archive.")
                self.prefix = hit[: -len(TRACE)]
                self.names = [n[len(self.prefix):] for n in every if n.startswith(self.prefix) and not n.endswith("/")]
        except OSError as e:
            raise RooflensError(f"cannot read {path}: {e.strerror or e}.") from None
        except zipfile.BadZipFile as e:
            raise RooflensError(f"{path} is a damaged zip archive ({e}).") from None

    def read(self, name: str) -> bytes:
        try:
            if self._zip is not None:
                return self._zip.read(self.prefix + name)
            return (self.root / name).read_bytes()
        except KeyError:
            raise RooflensError(f"{self.path} has no {name}.") from None
        except OSError as e:
            raise RooflensError(f"cannot read {name} of {self.path}: {e.strerror or e}.") from None
        except (zipfile.BadZipFile, EOFError, lzma.LZMAError, ValueError) as e:
            raise RooflensError(f"{self.path} is damaged or truncated: {name} cannot be read ({e}).") from None

    def has(self, name: str) -> bool:
        return name in self.names

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()


def is_nsys_archive(path: str | Path) -> bool:
    """Whether ``path`` is an nsys-jax archive, by its content: a directory holding
    ``nvtx_gpu_proj_trace/trace.parquet``, or a zip whose members include it. A remote path (an
    fsspec URL) is judged by its name (``*.zip``) and told apart when read."""
    s = str(path)
    if "://" in s:
        return s.rstrip("/").endswith(".zip")
    p = Path(s)
    try:
        if not s.endswith(".zip"):
            return (p / TRACE).is_file()  # one stat: false for a file, and for other directories
        if not p.is_file() or not zipfile.is_zipfile(p):
            return False
        with zipfile.ZipFile(p) as z:
            return any(n == TRACE or n.endswith("/" + TRACE) for n in z.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def parquet(archive: Archive, name: str, columns: list[str] | None = None):
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = archive.read(name)
    try:
        return pq.read_table(io.BytesIO(data), columns=columns)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise RooflensError(f"{archive.path} is damaged or truncated: {name} is not a readable parquet file "
                            f"({str(e).splitlines()[0] if str(e) else type(e).__name__}).") from None


# -- the device -----------------------------------------------------------------------------------

@dataclass
class GpuInfo:
    """What ``device-metadata.parquet`` says of the process's GPU, under XSpace GPU plane-stat names."""

    name: str = ""
    plane_stats: dict = field(default_factory=dict)
    global_id: int = -1
    process: int = -1


def metadata_columns(table) -> dict[tuple[str, str], list]:
    """``('TARGET_INFO_GPU', 'name')`` column names (pandas MultiIndex, flattened) → (group, field)."""
    out = {}
    for col in table.column_names:
        m = re.fullmatch(r"\('([^']*)', '([^']*)'\)", col)
        out[(m.group(1), m.group(2)) if m else ("", col)] = table.column(col).to_pylist()
    return out


def gpu_info(archive: Archive) -> tuple[GpuInfo, list[str]]:
    """The GPU this process ran on (the one XLA named, else the first), and notes."""
    if not archive.has(DEVICE_METADATA):
        return GpuInfo(), [f"the archive has no {DEVICE_METADATA}: the GPU is unknown (give --chip)"]
    cols = metadata_columns(parquet(archive, DEVICE_METADATA))
    rows = len(next(iter(cols.values()), []))
    if not rows:
        return GpuInfo(), [f"{DEVICE_METADATA} lists no GPU: the GPU is unknown (give --chip)"]

    def get(group: str, key: str, row: int):
        v = cols.get((group, key))
        return v[row] if v is not None and row < len(v) else None

    xla = [r for r in range(rows) if _XLA_DEVICE.search(str(get("TARGET_INFO_NVTX_CUDA_DEVICE", "name", r) or ""))]
    row = xla[0] if xla else 0
    notes = []
    if len(xla) > 1:
        notes.append(f"the process drove {len(xla)} GPUs; its op ranges do not say which, so all are "
                     f"counted on the first ({get('TARGET_INFO_GPU', 'name', row)})")
    g = "TARGET_INFO_GPU"
    name = str(get(g, "name", row) or "")
    stats: dict = {"device_name": name}
    if name:
        stats["device_vendor"] = name.split()[0] if name.split()[0].lower() in ("nvidia", "amd") else "NVIDIA"
    # XSpace GPU plane stats (xla/tsl/profiler/utils/xplane_schema.h): clock_rate in kHz, memory_bandwidth
    # in bytes/s, memory_size in bytes, core_count = SMs
    for key, src, scale in (("clock_rate", "clockRate", 1e-3), ("core_count", "smCount", 1),
                            ("memory_bandwidth", "memoryBandwidth", 1), ("memory_size", "totalMemory", 1),
                            ("compute_cap_major", "computeMajor", 1), ("compute_cap_minor", "computeMinor", 1),
                            ("l2_cache_size", "l2CacheSize", 1)):
        v = get(g, src, row)
        if isinstance(v, int | float) and v == v:
            stats[key] = int(v * scale) if float(v * scale).is_integer() else float(v * scale)
    chip = get(g, "chipName", row)
    if chip:
        stats["chip_name"] = str(chip)
    m = _XLA_DEVICE.search(str(get("TARGET_INFO_NVTX_CUDA_DEVICE", "name", row) or ""))
    cu = get("", "cuDevice", row)
    global_id = int(m.group(1)) if m else int(cu) if isinstance(cu, int) else -1
    return GpuInfo(name, stats, global_id, int(m.group(2)) if m else -1), notes


def hostname(archive: Archive) -> str:
    if not archive.has(SYSTEM_METADATA):
        return ""
    t = parquet(archive, SYSTEM_METADATA, ["name", "value"]).to_pydict()
    return next((str(v) for k, v in zip(t["name"], t["value"]) if k == "Hostname" and v), "")


# -- the HLO --------------------------------------------------------------------------------------

def dump_files(archive: Archive) -> dict[tuple[int, str], dict[str, str]]:
    """(program id, module name) → {"before": member, "after": member} of the archive's HLO dump."""
    out: dict[tuple[int, str], dict[str, str]] = {}
    for n in archive.names:
        m = _DUMP.search(n)
        if not m:
            continue
        stage = m.group(3)
        kind = "after" if stage.endswith("after_optimizations") else "before" if stage == "before_optimizations" \
            else None
        if kind:
            out.setdefault((int(m.group(1)), m.group(2)), {})[kind] = n
    return out


def read_hlo_proto(archive: Archive, member: str) -> bytes | None:
    """The ``HloModuleProto`` of one dump member (an xz-compressed ``HloProto``), with ids that the
    installed jaxlib can read (:mod:`rooflens.trace.formats.hlo_ids`); None when it cannot be read."""
    from rooflens.trace.formats.hlo_ids import compact_ids

    try:
        proto = lzma.decompress(archive.read(member))
    except (lzma.LZMAError, RooflensError):
        return None
    module = hlo_module_of(proto)
    if module is None:
        return None
    try:
        return compact_ids(module)
    except (ValueError, IndexError, KeyError):
        return None


