"""The hardware catalogue: chips as data, every number with the document it came from.

A catalogue file is TOML. Each chip is a table ``[chip.<name>]`` with a few plain strings
(``description``, ``vendor``, ``kind``, ``device_unit``, ``device_kinds``) and sections whose
numbers are inline tables ``{ value = ..., source = "document, section" }``::

    [chip.my-tpu]
    description = "..."
    kind = "tpu"
    device_unit = "chip"
    [chip.my-tpu.peak_flops_per_s]
    bf16 = { value = 1.97e14, source = "vendor datasheet, table 1" }
    [chip.my-tpu.memory]
    hbm_bytes_per_s = { value = 8.1e11, source = "..." }

The shipped files live in ``rooflens/chips/data``. Users add chips (or replace one of the same
name) with ``ROOFLENS_CHIPS=file.toml[:dir:...]`` or ``--chips FILE``; ``rooflens calibrate``
writes the chip ``local`` into the user's cache directory, which is read last.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType

from rooflens.errors import RooflensError
from rooflens.userdirs import cache_dir

#: Sections of a chip table that hold cited numbers.
SECTIONS = ("peak_flops_per_s", "memory", "compute", "interconnect", "topology", "overheads")
#: Plain (uncited) string fields of a chip table.
PLAIN_FIELDS = ("description", "vendor", "kind", "device_unit", "device_kinds", "calibration", "calibrated_at",
                "calibration_spread")
KINDS = ("tpu", "gpu", "cpu")
DEVICE_UNITS = ("core", "chip", "gpu", "cpu")
WRAPAROUND_RULES = ("always", "full-axis", "multiple-of-4", "full-cube", "none")
#: Peak keys a dtype may be priced at.
PEAK_KEYS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")
LOCAL_CHIP = "local"


class ChipError(RooflensError):
    """An unknown chip name, or a catalogue file that cannot be read."""


@dataclass(frozen=True, slots=True)
class Figure:
    """One catalogue number and where it comes from."""

    value: float | int | str | tuple
    source: str


@dataclass(frozen=True)
class Chip:
    """What one JAX device of a given kind can do, as published (or measured, for ``local``).

    ``figures`` maps dotted keys (``"memory.hbm_bytes_per_s"``) to :class:`Figure`; the
    properties below are the ones the cost model reads. A figure that was not published is
    absent, and its property is ``None``.
    """

    name: str
    description: str
    vendor: str
    kind: str  # tpu | gpu | cpu
    device_unit: str  # what one JAX device is: core | chip | gpu | cpu
    device_kinds: tuple[str, ...]
    figures: Mapping[str, Figure]
    origin: str  # the file it was read from
    calibration: str = ""  # for measured chips: how, when, the spread
    calibrated_at: str = ""  # for measured chips: when ("2026-11-26 06:45 UTC")
    calibration_spread: float | None = None  # for measured chips: the largest IQR / median of the rates it kept

    def figure(self, key: str) -> Figure | None:
        return self.figures.get(key)

    def value(self, key: str, default=None):
        f = self.figures.get(key)
        return default if f is None else f.value

    def source(self, key: str) -> str:
        f = self.figures.get(key)
        return "" if f is None else f.source

    @property
    def peak_flops_per_s(self) -> dict[str, float]:
        prefix = "peak_flops_per_s."
        return {k[len(prefix):]: float(f.value) for k, f in self.figures.items() if k.startswith(prefix)}

    @property
    def hbm_bytes(self) -> float | None:
        return self.value("memory.hbm_bytes")

    @property
    def hbm_bytes_per_s(self) -> float | None:
        return self.value("memory.hbm_bytes_per_s")

    @property
    def ici_links(self) -> int | None:
        return self.value("interconnect.ici_links")

    def _oneway(self, link: str) -> float | None:
        """A link's one-way bandwidth: as published, or half the published bidirectional figure."""
        v = self.value(f"interconnect.{link}_bytes_per_s_oneway")
        both = self.value(f"interconnect.{link}_bytes_per_s_bidirectional")
        return v if v is not None or both is None else both / 2

    @property
    def ici_link_bytes_per_s_oneway(self) -> float | None:
        return self._oneway("ici_link")

    @property
    def nvlink_bytes_per_s_oneway(self) -> float | None:
        return self._oneway("nvlink")

    @property
    def network_bytes_per_s_oneway(self) -> float | None:
        return self.value("interconnect.network_bytes_per_s_oneway")

    @property
    def torus_dims(self) -> int | None:
        return self.value("topology.torus_dims")

    @property
    def max_axis_devices(self) -> int | None:
        return self.value("topology.max_axis_devices")

    @property
    def wraparound(self) -> str | None:
        return self.value("topology.wraparound")

    @property
    def nvlink_domain_devices(self) -> int | None:
        return self.value("topology.nvlink_domain_devices")

    @property
    def slices(self) -> tuple[tuple[int, ...], ...]:
        """The slice shapes the vendor sells (TPU), smallest first; () when not published."""
        return tuple(tuple(int(d) for d in s) for s in self.value("topology.slices", ()) or ())

    def default_slice(self, num_devices: int) -> tuple[int, ...] | None:
        """The published slice shape with exactly ``num_devices`` devices, if there is one."""
        for s in self.slices:
            if math.prod(s) == num_devices:
                return s
        return None

    # -- the scale-up link of a GPU: NVLink through a switch, or AMD Infinity Fabric point to point --------

    @property
    def scaleup_link(self) -> str:
        if self.kind == "tpu":
            return "ICI"
        if self.value("interconnect.infinity_fabric_links") is not None:
            return "Infinity Fabric"
        return "NVLink"

    @property
    def scaleup_domain_devices(self) -> int | None:
        """How many devices the scale-up link joins (an NVLink switch domain, a fully connected board)."""
        return self.value("topology.infinity_fabric_domain_devices", self.nvlink_domain_devices)

    def scaleup_bytes_per_s_oneway(self, group: int | None = None) -> float | None:
        """One-way bandwidth a device of a group of ``group`` devices can send at inside its scale-up domain.

        Through a switch (NVLink + NVSwitch) every GPU sends at its whole NVLink bandwidth whatever the
        group. On a fully connected board (Infinity Fabric) each pair has its own link, so a device
        reaches the others over ``group − 1`` links at once (all of them for the whole board).
        """
        per_link = self._oneway("infinity_fabric_link")
        if per_link is not None:
            links = int(self.value("interconnect.infinity_fabric_links", 1))
            used = links if group is None else max(1, min(group - 1, links))
            return per_link * used
        return self.nvlink_bytes_per_s_oneway

    # -- latency ---------------------------------------------------------------------------------------

    @property
    def ici_hop_latency_s(self) -> float | None:
        """Fixed cost of one ICI hop (TPU), whatever the bytes: the scaling book's T_min."""
        return self.value("interconnect.ici_hop_latency_s")

    def collective_latency(self, protocol: str = "ll") -> tuple[float, float, float] | None:
        """(base, per scale-up step, per network step) latency in seconds of a NCCL/RCCL-style ring, for
        ``protocol`` "ll" (low latency) or "simple"; None when the chip publishes no base latency."""
        sfx = "" if protocol == "ll" else f"_{protocol}"
        base = self.value(f"interconnect.collective_base_latency{sfx}_s")
        if base is None:
            return None
        hop = self.value(f"interconnect.link_hop_latency{sfx}_s", 0.0)
        net = self.value(f"interconnect.network_hop_latency{sfx}_s",
                         self.value("interconnect.network_hop_latency_s", hop))
        return float(base), float(hop), float(net)

    @property
    def ll_bandwidth_fraction(self) -> float:
        return float(self.value("interconnect.ll_bandwidth_fraction", 1.0))

    @property
    def kernel_launch_s(self) -> float | None:
        """A published per-kernel launch cost (the floor of a small op), or None where none is published."""
        return self.value("overheads.kernel_launch_s")

    # -- what identifies the device in a trace ---------------------------------------------------------

    @property
    def core_count(self) -> int | None:
        """SMs (NVIDIA) or compute units (AMD): what a GPU trace reports as ``core_count``."""
        v = self.value("compute.compute_units", self.value("memory.sm_count", self.value("compute.sm_count")))
        return None if v is None else int(v)

    @property
    def peak_clock_hz(self) -> float | None:
        return self.value("compute.peak_clock_hz")

    def matmul_rate(self, key: str, flops: float, contracted: int = 0) -> float | None:
        """Achieved FLOP/s of a matmul from measurements, when the chip has them (``local``).

        A CPU's matmul throughput depends on shape (threading, cache blocking), which one peak
        hides. With a measured grid over (output elements, K), the rate is the inverse-distance⁴
        weighted mean in log space of the grid's rates; else a curve over FLOPs, interpolated in
        log(FLOPs) and held flat beyond the measured sizes.
        """
        grid = self.value(f"compute.matmul_grid_{key}")
        if grid and contracted > 0:
            out = flops / (2.0 * contracted)
            x, y = math.log(max(out, 1.0)), math.log(contracted)
            num = den = 0.0
            for mn, k, rate in grid:
                d2 = (x - math.log(mn)) ** 2 + (y - math.log(k)) ** 2
                if d2 < 1e-12:
                    return float(rate)
                num += float(rate) / d2 ** 2  # weight 1/distance⁴: the nearest shapes dominate
                den += 1.0 / d2 ** 2
            return num / den
        curve = self.value(f"compute.matmul_curve_{key}")
        if not curve:
            return None
        pts = sorted((float(f), float(r)) for f, r in curve)
        if flops <= pts[0][0]:
            return pts[0][1]
        for (f0, r0), (f1, r1) in zip(pts, pts[1:]):
            if flops <= f1:
                w = (math.log(flops) - math.log(f0)) / (math.log(f1) - math.log(f0))
                return r0 + w * (r1 - r0)
        return pts[-1][1]

    @property
    def op_overhead_s(self) -> float:
        """Fixed cost of launching one op (measured by calibration; 0 when not known)."""
        return float(self.value("overheads.op_overhead_s", 0.0))

    def to_dict(self) -> dict:
        return {
            "name": self.name, "description": self.description, "vendor": self.vendor, "kind": self.kind,
            "device_unit": self.device_unit, "device_kinds": list(self.device_kinds), "origin": self.origin,
            "calibration": self.calibration, "calibrated_at": self.calibrated_at,
            "calibration_spread": self.calibration_spread,
            "figures": {k: {"value": list(f.value) if isinstance(f.value, tuple) else f.value, "source": f.source}
                        for k, f in self.figures.items()},
        }


def _figure(where: str, key: str, raw) -> Figure:
    if not isinstance(raw, dict) or "value" not in raw or "source" not in raw:
        raise ChipError(f"{where}: {key} must be an inline table {{ value = ..., source = \"...\" }}.")
    value = raw["value"]
    if isinstance(value, list):
        value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
    if isinstance(value, bool) or not isinstance(value, int | float | str | tuple):
        raise ChipError(f"{where}: {key} has a value of an unsupported type ({type(value).__name__}).")
    if isinstance(value, int | float) and not value >= 0:
        raise ChipError(f"{where}: {key} must not be negative.")
    source = str(raw["source"]).strip()
    if not source:
        raise ChipError(f"{where}: {key} has an empty source; every number needs one.")
    return Figure(value, source)


def chip_from_table(name: str, table: Mapping, origin: str) -> Chip:
    """Build a :class:`Chip` from one ``[chip.<name>]`` table, checking its form."""
    where = f"{origin}: chip {name!r}"
    if not isinstance(table, Mapping):
        raise ChipError(f"{where} is not a table.")
    figures: dict[str, Figure] = {}
    for key, raw in table.items():
        if key in PLAIN_FIELDS:
            continue
        if key not in SECTIONS:
            known = ", ".join(SECTIONS + PLAIN_FIELDS)
            raise ChipError(f"{where} has an unknown section or field {key!r} (known: {known}).")
        if not isinstance(raw, Mapping):
            raise ChipError(f"{where}: {key} must be a table.")
        for sub, fig in raw.items():
            figures[f"{key}.{sub}"] = _figure(where, f"{key}.{sub}", fig)
    kind = str(table.get("kind", "")).lower()
    if kind not in KINDS:
        raise ChipError(f"{where} needs kind = one of {', '.join(KINDS)}.")
    unit = str(table.get("device_unit", {"gpu": "gpu", "cpu": "cpu"}.get(kind, "chip")))
    if unit not in DEVICE_UNITS:
        raise ChipError(f"{where}: device_unit must be one of {', '.join(DEVICE_UNITS)}.")
    peaks = [k for k in figures if k.startswith("peak_flops_per_s.")]
    bad = [k.split(".", 1)[1] for k in peaks if k.split(".", 1)[1] not in PEAK_KEYS]
    if bad:
        raise ChipError(f"{where}: unknown peak dtype {bad[0]!r} (known: {', '.join(PEAK_KEYS)}).")
    if not peaks:
        raise ChipError(f"{where} has no peak_flops_per_s; at least one dtype is needed.")
    if "memory.hbm_bytes_per_s" not in figures:
        raise ChipError(f"{where} has no memory.hbm_bytes_per_s.")
    wrap = figures.get("topology.wraparound")
    if wrap is not None and wrap.value not in WRAPAROUND_RULES:
        raise ChipError(f"{where}: topology.wraparound must be one of {', '.join(WRAPAROUND_RULES)}.")
    kinds = table.get("device_kinds", ())
    if isinstance(kinds, str):
        kinds = (kinds,)
    return Chip(
        name=name, description=str(table.get("description", "")), vendor=str(table.get("vendor", "")),
        kind=kind, device_unit=unit, device_kinds=tuple(str(k) for k in kinds),
        figures=MappingProxyType(figures), origin=origin, calibration=str(table.get("calibration", "")),
        calibrated_at=str(table.get("calibrated_at", "")), calibration_spread=_spread(where, table),
    )


def _spread(where: str, table: Mapping) -> float | None:
    v = table.get("calibration_spread")
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 0:
        raise ChipError(f"{where}: calibration_spread must be a number (IQR / median), 0 or more.")
    return float(v)


def read_catalog_file(path: str | os.PathLike) -> dict[str, Chip]:
    """Every chip of one TOML file (a user's or a shipped one)."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise ChipError(f"chip file {p} does not exist.") from None
    except IsADirectoryError:
        raise ChipError(f"chip file {p} is a directory.") from None
    except OSError as e:
        raise ChipError(f"cannot read chip file {p}: {e.strerror or e}.") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ChipError(f"chip file {p} is not valid TOML ({e}).") from None
    return chips_of_document(doc, str(p))


def chips_of_document(doc: Mapping, origin: str) -> dict[str, Chip]:
    """Every chip of one parsed catalogue document (``origin``: where it was read, for messages)."""
    chips = doc.get("chip")
    if not isinstance(chips, Mapping) or not chips:
        raise ChipError(f"chip file {origin} has no [chip.<name>] table.")
    return {name: chip_from_table(name, table, origin) for name, table in chips.items()}


def read_catalog_text(text: str, origin: str) -> dict[str, Chip]:
    """Every chip of a catalogue file's text (a calibration recorded with a run, read back)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ChipError(f"chip file {origin} is not valid TOML ({e}).") from None
    return chips_of_document(doc, origin)


def local_chip_path() -> Path:
    return cache_dir() / "local.toml"


def _shipped_files() -> list[Path]:
    data = resources.files("rooflens.hardware") / "data"
    return sorted(Path(str(p)) for p in data.iterdir() if p.name.endswith(".toml"))


@lru_cache(maxsize=1)
def _shipped() -> MappingProxyType:
    out: dict[str, Chip] = {}
    for f in _shipped_files():
        out.update(read_catalog_file(f))
    return MappingProxyType(out)


def _user_files(extra: Iterable[str | os.PathLike] = ()) -> list[Path]:
    files: list[Path] = []
    for entry in filter(None, os.environ.get("ROOFLENS_CHIPS", "").split(os.pathsep)):
        p = Path(entry)
        files.extend(sorted(p.glob("*.toml")) if p.is_dir() else [p])
    files.extend(Path(e) for e in extra)
    return files


def catalog(extra_files: Iterable[str | os.PathLike] = (), shipped: bool = True) -> dict[str, Chip]:
    """All known chips: shipped (unless not ``shipped``), then ``ROOFLENS_CHIPS``, then ``extra_files``, then
    ``local``.

    A later file replaces a chip of the same name, so a user can correct a shipped figure.
    """
    chips = dict(_shipped()) if shipped else {}
    for f in _user_files(extra_files):
        chips.update(read_catalog_file(f))
    local = local_chip_path()
    if local.is_file():
        chips.update(read_catalog_file(local))
    return chips


def chips(extra_files: Iterable[str | os.PathLike] = ()) -> list[str]:
    """Names of every known chip."""
    return sorted(catalog(extra_files))


def shared_by(c: Chip, n: float) -> Chip:
    """``c`` as each of ``n`` devices sees it when they share it (forced CPU devices share the cores
    and the memory bus that calibration measured for one device running alone)."""
    if n <= 1:
        return c
    rated = ("peak_flops_per_s.", "memory.hbm_bytes_per_s")
    figures = {}
    for key, fig in c.figures.items():
        if key.startswith(rated) and isinstance(fig.value, int | float):
            figures[key] = Figure(fig.value / n, f"{fig.source}; shared by {n:.3g} devices: ÷ {n:.3g}")
        elif key.startswith(("compute.matmul_grid_", "compute.matmul_curve_")):
            figures[key] = Figure(tuple(tuple(v[:-1]) + (v[-1] / n,) for v in fig.value),
                                  f"{fig.source}; shared by {n:.3g} devices: rates ÷ {n:.3g}")
        else:
            figures[key] = fig
    return Chip(name=c.name, description=f"{c.description} (shared by {n:.3g} devices)", vendor=c.vendor, kind=c.kind,
                device_unit=c.device_unit, device_kinds=c.device_kinds, figures=MappingProxyType(figures),
                origin=c.origin, calibration=c.calibration, calibrated_at=c.calibrated_at,
                calibration_spread=c.calibration_spread)


def chip(name: str | Chip, extra_files: Iterable[str | os.PathLike] = ()) -> Chip:
    """The chip called ``name`` (or one of its ``device_kinds``), or a ChipError naming the choices."""
    if isinstance(name, Chip):
        return name
    low = name.strip().lower()
    # no shipped chip is 'local' by name or kind (tests/test_hardware.py): its search parses none of them
    known = catalog(extra_files, shipped=low != LOCAL_CHIP)
    if name in known:
        return known[name]
    for c in known.values():
        if low == c.name.lower() or low in (k.lower() for k in c.device_kinds):
            return c
    if low == LOCAL_CHIP:
        raise ChipError(f"there is no calibrated chip 'local' yet ({local_chip_path()} is missing); "
                        "run `rooflens calibrate` first.")
    raise ChipError(f"unknown chip {name!r}; known chips: {', '.join(sorted(known))}.")


@dataclass(frozen=True)
class ChipTable:
    """A plain listing row for ``rooflens chips`` (renderers print it, they do not compute it)."""

    name: str
    device_unit: str
    description: str
    bf16_flops_per_s: float | None
    hbm_bytes: float | None
    hbm_bytes_per_s: float | None
    link_bytes_per_s_oneway: float | None
    origin: str
    link: str = ""  # which link the bandwidth is: ICI (one link), NVLink, Infinity Fabric (all links)


def chip_rows(extra_files: Iterable[str | os.PathLike] = ()) -> list[ChipTable]:
    rows = []
    for c in sorted(catalog(extra_files).values(), key=lambda c: (c.kind, c.name)):
        peaks = c.peak_flops_per_s
        rows.append(ChipTable(
            name=c.name, device_unit=c.device_unit, description=c.description,
            bf16_flops_per_s=peaks.get("bf16", peaks.get("fp32")), hbm_bytes=c.hbm_bytes,
            hbm_bytes_per_s=c.hbm_bytes_per_s,
            link_bytes_per_s_oneway=c.ici_link_bytes_per_s_oneway or c.scaleup_bytes_per_s_oneway(),
            origin=c.origin, link=c.scaleup_link if c.kind != "cpu" else "",
        ))
    return rows
