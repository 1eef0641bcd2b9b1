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
from rooflens.trace.formats.nsys_sqlite.tables import gpu_plane_stats, gpu_vendor, number_stat
from rooflens.trace.formats.raw import hlo_module_of
from rooflens.trace.formats.tsl import XlaDevice, xla_device

TRACE = "nvtx_gpu_proj_trace/trace.parquet"
DEVICE_METADATA = "device-metadata.parquet"
SYSTEM_METADATA = "system-metadata.parquet"
HOST_RANGES = "report_nvtx_pushpop_trace.csv.xz"  # the host-side NVTX ranges (compilation included)
_DUMP = re.compile(r"(?:^|/)dump/module_(\d+)\.([^/]+?)\.([^./]*(?:\.\d+)?[^./]*)\.hlo\.pb\.xz$")


# -- the archive ----------------------------------------------------------------------------------

class Archive:
    """The members of an nsys-jax archive, zipped or extracted, by their path inside it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip: zipfile.ZipFile | None = None
        try:
            if path.is_dir():
                if (path / TRACE).is_dir():
                    _refuse_combined(path, [p.name for p in (path / TRACE).iterdir()])
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
                if hit is None and any(_COMBINED.search(n) for n in every):
                    _refuse_combined(path, [_COMBINED.search(n).group(1) for n in every if _COMBINED.search(n)])
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


#: ``nsys-jax-combine`` stores a member that differs between its input archives once per input, as
#: ``<member>/<input archive's stem>`` (JAX-Toolbox ``nsys_jax/scripts/nsys_jax_combine.py``)
_COMBINED = re.compile(r"(?:^|/)" + re.escape(TRACE) + r"/([^/]+)$")


def _refuse_combined(path: Path, stems: list[str]) -> None:
    shown = ", ".join(sorted(stems)[:4]) + (", …" if len(stems) > 4 else "")
    raise RooflensError(f"{path} is an nsys-jax-combine archive of {len(stems)} processes ({shown}), which rooflens "
                        "does not read: give it the per-process nsys-jax archives (or the directory holding them).")


def is_nsys_archive(path: str | Path) -> bool:
    """Whether ``path`` is an nsys-jax archive, by its content: a directory holding
    ``nvtx_gpu_proj_trace/trace.parquet`` (a file, or nsys-jax-combine's directory of them), or a zip
    whose members include it. A remote path (an fsspec URL) is judged by its name (``*.zip``) and told
    apart when read."""
    s = str(path)
    if "://" in s:
        return s.rstrip("/").endswith(".zip")
    p = Path(s)
    try:
        if not s.endswith(".zip"):
            return (p / TRACE).exists()  # one stat: false for a file, and for other directories
        if not p.is_file() or not zipfile.is_zipfile(p):
            return False
        with zipfile.ZipFile(p) as z:  # an nsys-jax-combine archive too: told apart (and refused) when read
            return any(n == TRACE or n.endswith("/" + TRACE) or _COMBINED.search(n) for n in z.namelist())
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


# -- the devices ----------------------------------------------------------------------------------

#: XLA names each GPU it drives and the thread that launches work on it (:func:`rooflens.trace.formats.tsl.
#: xla_device`): the device in ``device-metadata.parquet`` (``TARGET_INFO_NVTX_CUDA_DEVICE``), the thread in
#: ``thread-metadata.parquet``. The launcher thread is used only when one process drives several GPUs; with
#: one GPU per process the main thread launches (as nsys-jax's ``data_loaders.py`` reads it: a module's
#: ranges belong to the GPU of the thread that pushed them).
THREAD_METADATA = "thread-metadata.parquet"
#: ``module_<id>.<name>.gpu_target_config.pbtxt``: the GPU XLA compiled for (``xla.GpuTargetConfigProto``,
#: ``xla/stream_executor/device_description.proto``), dumped beside the HLO; archives without
#: ``device-metadata.parquet`` name their GPU only there
_TARGET_CONFIG = re.compile(r"(?:^|/)dump/module_(\d+)\.(.+)\.gpu_target_config\.pbtxt(?:\.xz)?$")
#: ``device_description_str`` is the device's name in dumps (``NVIDIA H100 80GB HBM3``) but its model
#: string in XLA's own spec files (``sm_8.0 with 17071734784B RAM, 56 cores, …``): not a name
_MODEL_STRING = re.compile(r"^(?:sm_|gfx)\S* with \d+B RAM")


@dataclass
class GpuInfo:
    """What the archive says of the process's GPUs, under XSpace GPU plane-stat names (so chip
    inference is the same): their name and properties, and the GPUs XLA named (by local ordinal)."""

    name: str = ""
    plane_stats: dict = field(default_factory=dict)
    devices: list[XlaDevice] = field(default_factory=list)
    source: str = ""  # the member it was read from

    @property
    def global_id(self) -> int:
        return self.devices[0].global_id if self.devices else -1

    @property
    def process(self) -> int:
        return self.devices[0].process if self.devices else -1


def metadata_columns(table) -> dict[tuple[str, str], list]:
    """``('TARGET_INFO_GPU', 'name')`` column names (pandas MultiIndex, flattened) → (group, field)."""
    out = {}
    for col in table.column_names:
        m = re.fullmatch(r"\('([^']*)', '([^']*)'\)", col)
        out[(m.group(1), m.group(2)) if m else ("", col)] = table.column(col).to_pylist()
    return out


def gpu_info(archive: Archive) -> tuple[GpuInfo, list[str]]:
    """The process's GPUs (``device-metadata.parquet``, else the XLA dump's ``gpu_target_config``), and notes."""
    if not archive.has(DEVICE_METADATA):
        info, notes = target_config_info(archive)
        if info.name or info.plane_stats:
            return info, notes
        return GpuInfo(), notes + [f"the archive has no {DEVICE_METADATA} and its XLA dump no gpu_target_config: "
                                   "the GPU is unknown (give --chip)"]
    cols = metadata_columns(parquet(archive, DEVICE_METADATA))
    rows = len(next(iter(cols.values()), []))
    if not rows:
        return GpuInfo(), [f"{DEVICE_METADATA} lists no GPU: the GPU is unknown (give --chip)"]

    def get(group: str, key: str, row: int):
        v = cols.get((group, key))
        return v[row] if v is not None and row < len(v) else None

    named = {}
    for r in range(rows):
        hit = xla_device(str(get("TARGET_INFO_NVTX_CUDA_DEVICE", "name", r) or ""))
        if hit is not None:
            named[r] = hit[1]
    order = sorted(named, key=lambda r: (named[r].local, r))
    row = order[0] if order else 0
    g = "TARGET_INFO_GPU"  # the export's table, as nsys-jax copies it
    name = str(get(g, "name", row) or "")
    stats = gpu_plane_stats({key: v[row] for (group, key), v in cols.items() if group == g and row < len(v)})
    devices = [named[r] for r in order]
    if not devices:  # XLA named no device: the CUDA ordinal stands for it
        cu = get("", "cuDevice", row)
        devices = [XlaDevice(int(cu), int(cu), -1)] if isinstance(cu, int) else []
    notes = []
    kinds = sorted({str(get(g, "name", r) or "") for r in order} - {""})
    if len(kinds) > 1:
        notes.append(f"the process drove GPUs of {len(kinds)} kinds ({', '.join(kinds)}): all are priced as "
                     f"the first ({name})")
    return GpuInfo(name, stats, devices, DEVICE_METADATA), notes


def target_config(text: str) -> tuple[str, dict]:
    """(device name, XSpace GPU plane stats) of a ``GpuTargetConfigProto`` in text format (a dump's
    ``gpu_target_config.pbtxt``): ``gpu_device_info`` (core_count, memory_bandwidth in bytes/s,
    clock_rate_ghz, device_memory_size, l2_cache_size, cuda_compute_capability {major minor}, and in
    newer XLA its ``name`` and ``device_vendor``), ``platform_name``, ``device_description_str``.
    ValueError when the text is not such a message."""
    from rooflens.trace.formats.nsys.textproto import first, parse

    msg = parse(text)
    info = first(msg, "gpu_device_info", default={})
    if not isinstance(info, dict):
        raise ValueError("gpu_device_info is not a message")
    name = str(first(info, "name", default="") or "")
    described = str(first(msg, "device_description_str", default="") or "")
    if not name and described and not _MODEL_STRING.match(described):
        name = described
    platform = str(first(msg, "platform_name", default="") or "").upper()
    vendor = str(first(info, "device_vendor", default="") or "")
    vendor = gpu_vendor(vendor) if vendor else {"CUDA": "NVIDIA", "ROCM": "AMD"}.get(platform, "")
    stats: dict = {"device_name": name} if name else {}
    if vendor:
        stats["device_vendor"] = vendor
    for key, src, scale in (("core_count", "core_count", 1), ("memory_bandwidth", "memory_bandwidth", 1),
                            ("memory_size", "device_memory_size", 1), ("clock_rate", "clock_rate_ghz", 1e6),
                            ("l2_cache_size", "l2_cache_size", 1)):
        v = number_stat(first(info, src), scale)
        if v is not None and v > 0:
            stats[key] = round(v) if key == "clock_rate" else v
    # the compute capability: in gpu_device_info, or (before XLA moved it there) beside it
    cc = first(info, "cuda_compute_capability", default=None) or first(msg, "cuda_compute_capability", default=None)
    if isinstance(cc, dict):
        stats["compute_cap_major"] = int(first(cc, "major", default=0) or 0)
        stats["compute_cap_minor"] = int(first(cc, "minor", default=0) or 0)  # proto3: an absent 0
    return name, stats


def target_config_info(archive: Archive) -> tuple[GpuInfo, list[str]]:
    """The GPU the archive's XLA dump was compiled for (the first readable
    ``dump/module_*.gpu_target_config.pbtxt[.xz]``: one process compiles every module for its GPUs), and
    notes; an empty GpuInfo when the dump holds none that can be read."""
    members = sorted(n for n in archive.names if _TARGET_CONFIG.search(n))
    for bad, member in enumerate(members):
        try:
            data = archive.read(member)
            text = (lzma.decompress(data) if member.endswith(".xz") else data).decode("utf-8", "replace")
            name, stats = target_config(text)
        except (RooflensError, lzma.LZMAError, ValueError, TypeError, RecursionError):
            continue
        notes = [f"{bad} of the dump's gpu_target_config files cannot be read"] if bad else []
        shown = name or "a GPU it does not name"
        notes.append(f"the GPU, from the XLA dump's {member.rsplit('/', 1)[-1]} (the archive has no "
                     f"{DEVICE_METADATA}): {shown}" + (f", {stats['core_count']} SMs" if "core_count" in stats else ""))
        return GpuInfo(name, stats, [], member), notes
    return GpuInfo(), [f"none of the dump's {len(members)} gpu_target_config files can be read"] if members else []


def thread_devices(archive: Archive) -> dict[tuple[int, int], XlaDevice]:
    """(PID, TID) → the GPU whose work that thread launches, for every thread XLA named ``XlaLauncher:#…#``
    in ``thread-metadata.parquet`` (empty when the archive has none)."""
    if not archive.has(THREAD_METADATA):
        return {}
    import pyarrow.compute as pc

    t = parquet(archive, THREAD_METADATA)
    if not {"Name", "PID", "TID"} <= set(t.column_names):
        return {}
    t = t.select(["Name", "PID", "TID"]).filter(pc.starts_with(t.column("Name"), "XlaLauncher:"))
    out = {}
    for name, pid, tid in zip(*(t.column(c).to_pylist() for c in ("Name", "PID", "TID"))):
        hit = xla_device(str(name))
        if hit is not None and pid is not None and tid is not None:
            out[(int(pid), int(tid))] = hit[1]
    return out


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


