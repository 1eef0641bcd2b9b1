"""Which catalogue chip a trace ran on, from what the trace says about its devices.

A profile names its devices in several ways, none always present: the device name
(``device_type_string`` on TPU planes, the CUDA/ROCm device name such as
``NVIDIA A100-SXM4-40GB`` or ``AMD Instinct MI300X``), the vendor (``device_vendor``), and the
device's properties as the runtime reports them (``core_count``: SMs or compute units,
``memory_size`` in bytes, ``clock_rate`` in kHz, ``compute_cap_major/minor``; on TPU
``peak_teraflops_per_second`` and ``peak_hbm_bw_gigabytes_per_second``).

:func:`infer_chip` is a pure function of the device kind and those plane stats: a name that
matches a chip's ``device_kinds`` wins; otherwise the chips of the same vendor with the same core
count are told apart by memory size, then by clock (MI300X vs MI325X: 192 vs 256 GiB; MI350X vs
MI355X: 2.2 vs 2.4 GHz).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from rooflens.hardware.catalog import Chip, ChipError, catalog

VENDORS = {"amd": "amd", "advanced micro devices": "amd", "ati": "amd", "nvidia": "nvidia", "google": "google"}
#: How far the memory a runtime reports may sit from the published size (runtimes reserve some; GB vs GiB).
MEMORY_TOLERANCE = 0.15


def _norm(text) -> str:
    return " ".join(str(text or "").lower().replace("_", " ").split())


def _number(stats: Mapping, key: str) -> float | None:
    v = stats.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        return None
    try:
        f = float(v)
    except ValueError:
        return None
    return f if f > 0 else None


def _by_name(names: list[str], chips: Mapping[str, Chip]) -> tuple[Chip, str] | None:
    best: tuple[int, Chip, str] | None = None
    for name in names:
        for c in chips.values():
            for k in (c.name, *c.device_kinds):
                kn = _norm(k)
                if not kn:
                    continue
                if name == kn:
                    return c, f"the trace's device name {name!r}"
                # a runtime may add a suffix (a virtual function "… VF", a form factor): the longest known prefix wins
                if name.startswith(kn + " ") and (best is None or len(kn) > best[0]):
                    best = (len(kn), c, f"the trace's device name {name!r} (starts with {k!r})")
    return (best[1], best[2]) if best else None


_MODEL_WORD = re.compile(r"[a-z][a-z0-9-]*\d[a-z0-9-]*")  # mi300x, a100-sxm4-40gb, v5e
_NOT_MODEL = re.compile(r"hbm\d*e?|gen\d+|x\d+")  # memory and bus words many models share


def _by_model_word(names: list[str], chips: Mapping[str, Chip]) -> tuple[Chip, str] | None:
    """A name holding one chip's model word (a word of its device kinds that starts with a letter and
    holds a digit, such as ``mi300x`` or ``a100-sxm4-40gb``; not a memory or bus word like ``hbm3``)
    when no other chip claims that word: ``Instinct MI300X OAM``."""
    owners: dict[str, set[str]] = {}
    for c in chips.values():
        for k in c.device_kinds:
            for w in _norm(k).split():
                if _MODEL_WORD.fullmatch(w) and not _NOT_MODEL.fullmatch(w):
                    owners.setdefault(w, set()).add(c.name)
    for name in names:
        hits = {c for w in name.split() for c in owners.get(w, ())}
        if len(hits) == 1:
            (chip,) = hits
            return chips[chip], f"the trace's device name {name!r} (holds {chip}'s model name)"
    return None


#: AMD GPU architectures (LLVM target, and the compute capability ROCm reports as major.minor) →
#: catalogue chips: ROCm docs, Reference, AMD GPU specifications, Instinct table (MI300X and
#: MI325X are gfx942, MI350X and MI355X gfx950).
AMD_ARCHS = {"gfx942": ("mi300x", "mi325x"), "gfx950": ("mi350x", "mi355x")}


def _amd_arch(names: list[str], stats: Mapping) -> str:
    for n in names:
        for w in n.replace(":", " ").split():
            if w in AMD_ARCHS:
                return w
    major, minor = _number(stats, "compute_cap_major"), stats.get("compute_cap_minor")
    if major and isinstance(minor, int | float) and not isinstance(minor, bool):
        arch = f"gfx{int(major)}{int(minor)}"
        return next((a for a in AMD_ARCHS if a.startswith(arch)), "")
    return ""


def _describe(vendor: str, cores, mem, clock_hz) -> str:
    parts = [f"vendor {vendor}" if vendor else ""]
    if cores:
        parts.append(f"{cores:g} cores")
    if mem:
        parts.append(f"{mem / 2**30:.4g} GiB")
    if clock_hz:
        parts.append(f"{clock_hz / 1e9:.3g} GHz")
    return ", ".join(p for p in parts if p)


def _gpu_by_stats(vendor: str, stats: Mapping, chips: Mapping[str, Chip]) -> tuple[Chip, str] | None:
    cores = _number(stats, "core_count")
    mem = _number(stats, "memory_size")
    clock_khz = _number(stats, "clock_rate")
    clock_hz = clock_khz * 1e3 if clock_khz else None
    if not cores and not mem:
        return None
    cands = [c for c in chips.values() if c.kind == "gpu" and (not vendor or c.vendor == vendor)]
    if cores:
        cands = [c for c in cands if c.core_count == int(cores)]
    if mem:
        cands = [c for c in cands if c.hbm_bytes and abs(math.log(mem / c.hbm_bytes)) <= math.log1p(MEMORY_TOLERANCE)]
    if not cands:
        return None

    def distance(c: Chip) -> tuple[float, float]:
        dm = abs(math.log(mem / c.hbm_bytes)) if mem and c.hbm_bytes else 0.0
        dc = abs(math.log(clock_hz / c.peak_clock_hz)) if clock_hz and c.peak_clock_hz else 0.0
        return round(dm, 3), round(dc, 3)

    # equally close (no clock to tell an MI350X from an MI355X): the family's highest-clocked part
    best = min(cands, key=lambda c: (distance(c), -(c.peak_clock_hz or 0.0), c.name))
    tied = sorted(c.name for c in cands if c is not best and distance(c) == distance(best))
    also = f"; equally close: {', '.join(tied)}" if tied else ""
    return best, f"the trace's device properties ({_describe(vendor, cores, mem, clock_hz)}){also}"


def _tpu_by_stats(stats: Mapping, chips: Mapping[str, Chip]) -> tuple[Chip, str] | None:
    tflops = _number(stats, "peak_teraflops_per_second")
    hbm = _number(stats, "peak_hbm_bw_gigabytes_per_second")
    if not tflops or not hbm:
        return None
    cands = [c for c in chips.values() if c.kind == "tpu" and c.hbm_bytes_per_s and c.peak_flops_per_s.get("bf16")]
    if not cands:
        return None

    def distance(c: Chip) -> float:
        return abs(math.log(tflops * 1e12 / c.peak_flops_per_s["bf16"])) + abs(math.log(hbm * 1e9 / c.hbm_bytes_per_s))

    best = min(cands, key=distance)
    if distance(best) > 0.3:
        return None
    return best, f"the trace's peaks ({tflops:g} TFLOP/s, {hbm:g} GB/s HBM)"


def infer_chip(device_kind: str, plane_stats: Mapping | None = None,
               chips: Mapping[str, Chip] | None = None) -> tuple[Chip, str]:
    """The catalogue chip of a trace's devices and the reason, or a ChipError in one sentence.

    ``device_kind`` is what the trace calls its devices (a name, or only a vendor such as ``AMD``);
    ``plane_stats`` are the stats of its first device plane (see the module docstring).
    """
    stats = dict(plane_stats or {})
    chips = catalog() if chips is None else chips
    names = [_norm(n) for n in (device_kind, stats.get("device_type_string"), stats.get("device_name")) if _norm(n)]
    hit = _by_name(names, chips)
    if hit is not None:
        return hit
    vendor = VENDORS.get(_norm(stats.get("device_vendor")), "")
    for n in names:
        vendor = vendor or VENDORS.get(n, "") or next((v for k, v in VENDORS.items() if n.startswith(k + " ")), "")
    hit = _by_model_word(names, chips) or _gpu_by_stats(vendor, stats, chips) or _tpu_by_stats(stats, chips)
    if hit is not None:
        return hit
    arch = _amd_arch(names, stats) if vendor in ("amd", "") else ""
    family = {n: chips[n] for n in AMD_ARCHS.get(arch, ()) if n in chips}
    if family:  # the architecture narrows it to a family; the properties (if any) pick within it
        hit = _gpu_by_stats("amd", stats, family)
        if hit is not None:
            return hit[0], f"the architecture {arch} and {hit[1]}"
        order = list(family)  # equal clocks: the first-listed (the family's original part)
        best = max(family.values(), key=lambda c: (c.peak_clock_hz or 0.0, -order.index(c.name)))
        how = "the first" if len({c.peak_clock_hz for c in family.values()}) == 1 else "the highest-clocked"
        return best, (f"the architecture {arch} ({', '.join(order)}; nothing in the trace tells them apart, so "
                      f"{how}; give --chip for another)")
    what = _describe(vendor, _number(stats, "core_count"), _number(stats, "memory_size"),
                     (_number(stats, "clock_rate") or 0) * 1e3)
    shown = repr(device_kind) + (f" ({what})" if what else "")
    raise ChipError(f"the trace's devices are {shown}, which matches no catalogue chip; give --chip "
                    "(see `rooflens chips`).")


# -- what a trace's ops achieved bounds its chip from below ------------------------------------------

#: How far above a peak a measured rate may sit and still fit it: the 1 % that timer rounding and the
#: catalogue's rounded figures (920 vs Google's 918 TFLOP/s for v6e) leave.
RATE_TOLERANCE = 0.01


@dataclass(frozen=True)
class MeasuredRate:
    """What one op achieved: model FLOPs per second at the best of ``peak_keys`` (the catalogue peaks its
    operands' types may run at: ``bf16``, ``int8``, ``fp8``), and HBM bytes per second."""

    op: str
    flops_per_s: float
    peak_keys: tuple[str, ...]
    hbm_bytes_per_s: float


def peak_for_rate(c: Chip, rate: MeasuredRate) -> float:
    """The chip's fastest peak among the rate's types (all its peaks when it lists none of them)."""
    peaks = c.peak_flops_per_s
    return max((peaks[k] for k in rate.peak_keys if k in peaks), default=max(peaks.values(), default=0.0))


def fits(c: Chip, rate: MeasuredRate) -> bool:
    """Whether ``c`` could have run the op that fast (no roof of its own beaten)."""
    slack = 1.0 + RATE_TOLERANCE
    if rate.flops_per_s and rate.flops_per_s > peak_for_rate(c, rate) * slack:
        return False
    return not rate.hbm_bytes_per_s or rate.hbm_bytes_per_s <= (c.hbm_bytes_per_s or 0.0) * slack


def chips_fitting(rates: list[MeasuredRate], kind: str, chips: Mapping[str, Chip] | None = None) -> list[Chip]:
    """The catalogue chips of ``kind`` that every measured rate fits, slowest first."""
    chips = catalog() if chips is None else chips
    fit = [c for c in chips.values() if c.kind == kind and c.peak_flops_per_s and all(fits(c, r) for r in rates)]
    return sorted(fit, key=lambda c: (max(c.peak_flops_per_s.values()), c.hbm_bytes_per_s or 0.0, c.name))


def fastest_rates(rates: list[MeasuredRate]) -> tuple[MeasuredRate | None, MeasuredRate | None]:
    """The op with the highest FLOP rate and the op with the highest HBM rate."""
    by_flops = max((r for r in rates if r.flops_per_s), key=lambda r: r.flops_per_s, default=None)
    by_bytes = max((r for r in rates if r.hbm_bytes_per_s), key=lambda r: r.hbm_bytes_per_s, default=None)
    return by_flops, by_bytes


def describe_rates(rates: list[MeasuredRate], chips: list[Chip]) -> str:
    """The fastest rates, each as a share of every candidate's roof: '841 TFLOP/s bf16 (fusion.3: 91 % of
    tpu-v6e, 73 % of tpu-v7), 1.57 TB/s HBM (…)'."""
    by_flops, by_bytes = fastest_rates(rates)
    parts = []
    if by_flops is not None:
        shares = ", ".join(f"{by_flops.flops_per_s / peak_for_rate(c, by_flops):.0%} of {c.name}" for c in chips)
        parts.append(f"{by_flops.flops_per_s / 1e12:.4g} TFLOP/s {'/'.join(by_flops.peak_keys)} ({by_flops.op}"
                     + (f": {shares})" if shares else ")"))
    if by_bytes is not None:
        shares = ", ".join(f"{by_bytes.hbm_bytes_per_s / c.hbm_bytes_per_s:.0%} of {c.name}"
                           for c in chips if c.hbm_bytes_per_s)
        parts.append(f"{by_bytes.hbm_bytes_per_s / 1e9:.4g} GB/s HBM ({by_bytes.op}"
                     + (f": {shares})" if shares else ")"))
    return " and ".join(parts) if parts else "no op with counted FLOPs or bytes"


def infer_chip_from_rates(rates: list[MeasuredRate], kind: str,
                          chips: Mapping[str, Chip] | None = None) -> tuple[Chip, str]:
    """The one catalogue chip of ``kind`` fast enough for every op the trace measured, or a ChipError naming
    the candidates (a chip slower than a measured op cannot have run it; a faster one always could)."""
    fit = chips_fitting(rates, kind, chips)
    how = describe_rates(rates, fit)
    if len(fit) == 1:
        return fit[0], (f"the trace names no {kind.upper()} generation; its ops' measured rates, {how}, fit only "
                        f"{fit[0].name} of the catalogue")
    if not fit:
        raise ChipError(f"the trace names no {kind.upper()} generation and its ops' measured rates, {how}, fit no "
                        "catalogue chip; give --chip (see `rooflens chips`).")
    raise ChipError(f"the trace names no {kind.upper()} generation; its ops' measured rates, {how}, fit "
                    f"{', '.join(c.name for c in fit)} (a slower chip could not have run them): give --chip, one of "
                    "those.")


# -- a chip given against the trace's own devices ----------------------------------------------------

def trace_device_text(device_kind: str, plane_stats: Mapping | None = None, platform: str = "") -> str:
    """What a trace says its devices are, in words: 'AMD GPUs (gfx942, 304 cores, 192 GiB, 2.1 GHz)'."""
    stats = dict(plane_stats or {})
    name = next((str(n) for n in (stats.get("device_type_string"), stats.get("device_name"), device_kind)
                 if _norm(n)), "")
    if platform and (_norm(name) in VENDORS or _norm(name) in ("", platform)):  # a vendor alone: say what kind
        maker = name if _norm(name) in VENDORS else str(stats.get("device_vendor") or "")
        name = f"{maker} {platform.upper()}s".strip()
    vendor = VENDORS.get(_norm(stats.get("device_vendor")), "")
    clock_khz = _number(stats, "clock_rate")
    arch = _amd_arch([_norm(name)], stats) if vendor in ("amd", "") else ""
    what = _describe("", _number(stats, "core_count"), _number(stats, "memory_size"),
                     clock_khz * 1e3 if clock_khz else None)
    inner = ", ".join(p for p in (arch, what) if p)
    return (name or "an unnamed device") + (f" ({inner})" if inner else "")


def chip_mismatch(given: Chip, platform: str, device_kind: str, plane_stats: Mapping | None = None,
                  chips: Mapping[str, Chip] | None = None) -> str:
    """One sentence when the chip given (``--chip``) is not what the trace ran on, else "".

    The trace's chip is :func:`infer_chip`'s when its devices name or describe one; a CPU trace ran on
    CPU devices; a trace whose devices match no catalogue chip still disagrees with a chip of another
    kind (a GPU trace priced on a TPU) or vendor. The comparison on the given chip is then a what-if:
    how the same program would fare there, not how slow it ran."""
    what = trace_device_text(device_kind, plane_stats, platform)
    if platform == "cpu":
        if given.kind == "cpu":
            return ""
        return (f"the trace ran on {what}, not on {given.name}: the expected-vs-observed comparison is "
                f"a what-if on {given.name}, and its ratios compare the CPU's times with {given.name}'s roofline")
    try:
        ran, _ = infer_chip(device_kind, plane_stats, chips)
    except ChipError:
        ran = None
    if ran is not None:
        if ran.name == given.name or _norm(ran.name) in {_norm(k) for k in given.device_kinds}:
            return ""
        return (f"the trace ran on {what}, which is {ran.name}, not {given.name}: the expected-vs-observed comparison "
                f"is a what-if on {given.name}, and its ratios compare {ran.name}'s times with {given.name}'s "
                "roofline")
    stats = dict(plane_stats or {})
    vendor = VENDORS.get(_norm(stats.get("device_vendor")), "")
    cores, mem = _number(stats, "core_count"), _number(stats, "memory_size")
    other_device = ((cores and given.core_count and int(cores) != given.core_count) or (
        mem and given.hbm_bytes and abs(math.log(mem / given.hbm_bytes)) > math.log1p(MEMORY_TOLERANCE)))
    if (platform in ("gpu", "tpu") and given.kind not in (platform, "")) or (vendor and given.vendor
                                                                             and _norm(given.vendor) != vendor) \
            or (given.kind == platform == "gpu" and other_device):
        return (f"the trace ran on {what}, not on {given.name}: the expected-vs-observed "
                f"comparison is a what-if on {given.name}")
    return ""
