"""Collective traffic and time on a chip's interconnect.

``comm_bytes`` is what one device must send over its links; the time is
``comm_bytes / link_bytes_per_s × factor``, where the factor is what the topology and algorithm
make of it. With ``N`` devices in a group and ``V`` the per-device buffer (the gathered output for
an all-gather, the input otherwise):

======================  =========================  ==========================================
collective              comm_bytes                 factor
======================  =========================  ==========================================
all-gather              (N−1)/N · V_out            ring on a torus axis with wraparound: both
reduce-scatter          (N−1)/N · V_in             directions carry chunks, ⌈(N−1)/2⌉ hops →
all-reduce (= RS + AG)  2 · (N−1)/N · V            ⌈(N−1)/2⌉/(N−1) (≈ ½); without wraparound
                                                   (a line, or N = 2: one link): 1 (N−1 hops)
all-to-all              (N−1)/N · V                bidirectional ring: mean shortest distance / 2
                                                   per link; line: N²/4 chunks on the middle link
collective-permute      V                          1 (each device sends to a neighbour)
======================  =========================  ==========================================

``link_bytes_per_s`` is one ICI link in one direction on TPU (groups longer than one torus axis
use one ring per axis at once, dividing the time by the number of axes); on GPU it is the GPU's
whole NVLink bandwidth in one direction while the group fits in one NVLink domain (NVSwitch:
every pair is one hop, factor 1), and the scale-out network per GPU beyond it. On the CPU
(``local``) the "devices" share memory, so a collective costs a memory copy at the calibrated
memory bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rooflens.errors import RooflensError
from rooflens.hardware import Chip
from rooflens.units import fmt_bytes

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute", "collective-broadcast",
         "send", "recv")


@dataclass(frozen=True, slots=True)
class CommCost:
    kind: str
    group_size: int
    comm_bytes: float  # bytes each device sends over its links
    link_bytes_per_s: float
    factor: float  # algorithm/topology factor applied to comm_bytes / link_bytes_per_s
    hops: int  # sequential link steps (latency count)
    link: str  # which link: "ICI", "NVLink", "network", "memory"
    algorithm: str  # in words, with the assumption
    formula: str

    @property
    def t_comm_s(self) -> float:
        if self.link_bytes_per_s <= 0 or self.comm_bytes <= 0:
            return 0.0
        return self.comm_bytes / self.link_bytes_per_s * self.factor


def has_wraparound(chip: Chip, n: int) -> bool:
    """Whether a ring of ``n`` devices along one torus axis has its wraparound link."""
    if n <= 2:
        return False  # two devices share one link pair: nothing to wrap around
    rule = chip.wraparound or "none"
    if rule == "always":
        return True
    if rule == "full-axis":
        return chip.max_axis_devices is not None and n >= chip.max_axis_devices
    if rule == "multiple-of-4":
        return n % 4 == 0
    return False


def _torus_axes(chip: Chip, n: int) -> int:
    """How many torus axes a group of ``n`` devices spans (each runs its own ring)."""
    longest = chip.max_axis_devices or n
    dims = chip.torus_dims or 1
    if n <= longest or longest <= 1:
        return 1
    return max(1, min(dims, math.ceil(math.log(n) / math.log(longest))))


def _sent_bytes(kind: str, n: int, in_bytes: float, out_bytes: float) -> tuple[float, str]:
    frac = (n - 1) / n
    if kind == "all-gather":
        return frac * out_bytes, f"(N−1)/N × {fmt_bytes(out_bytes)} gathered"
    if kind == "reduce-scatter":
        return frac * in_bytes, f"(N−1)/N × {fmt_bytes(in_bytes)} input"
    if kind == "all-reduce":
        return 2 * frac * in_bytes, f"2 × (N−1)/N × {fmt_bytes(in_bytes)} (reduce-scatter + all-gather)"
    if kind == "all-to-all":
        return frac * in_bytes, f"(N−1)/N × {fmt_bytes(in_bytes)} input"
    return in_bytes, f"{fmt_bytes(in_bytes)} sent"


def _torus_factor(kind: str, n: int, wrap: bool) -> tuple[float, int, str]:
    if kind in ("collective-permute", "collective-broadcast", "send", "recv"):
        return 1.0, 1, "one hop to a neighbour"
    if kind == "all-to-all":
        if wrap:
            load = sum(min(d, n - d) for d in range(1, n)) / 2  # chunks per directed link
            return load / (n - 1), n // 2, "bidirectional ring (wraparound): shortest way round"
        load = (n // 2) * (n - n // 2)  # chunks crossing the middle link one way
        return load / (n - 1), n - 1, "line (no wraparound): the middle link carries N²/4 chunks"
    if wrap:
        hops = math.ceil((n - 1) / 2)
        return hops / (n - 1), hops, f"bidirectional ring with wraparound: {hops} hops, half the chunks each way"
    return 1.0, n - 1, f"no wraparound: {n - 1} hops in a line, each end receives on one link"


@dataclass(frozen=True, slots=True)
class Topology:
    """The physical shape of a TPU slice, e.g. ``4x4`` (v5e) or ``2x2x4`` (v5p).

    Device ids are laid out with the first axis fastest (id = x + X·y + X·Y·z), as TPU device
    ids are; a group of devices then spans the axes along which its members' coordinates vary.
    """

    dims: tuple[int, ...]

    @property
    def num_devices(self) -> int:
        return math.prod(self.dims)

    def coords(self, device: int) -> tuple[int, ...]:
        out = []
        for d in self.dims:
            out.append(device % d)
            device //= d
        return tuple(out)

    def __str__(self) -> str:
        return "x".join(map(str, self.dims))


def parse_topology(text: str | Topology | None) -> Topology | None:
    if text is None or isinstance(text, Topology):
        return text
    try:
        dims = tuple(int(p) for p in str(text).lower().replace("×", "x").split("x"))
    except ValueError:
        dims = ()
    if not dims or any(d < 1 for d in dims) or len(dims) > 3:
        raise RooflensError(f"bad topology {text!r}: write the slice shape like 4x4 or 2x2x4.")
    return Topology(dims)


@dataclass(frozen=True, slots=True)
class Span:
    """The torus axes one group of devices occupies: (extent, axis length) per spanned axis."""

    axes: tuple[tuple[int, int], ...]

    def describe(self) -> str:
        return " × ".join(f"{e} of {d}" for e, d in self.axes)


def group_span(topology: Topology, group: tuple[int, ...]) -> Span:
    coords = [topology.coords(d) for d in group]
    axes = []
    for a, dim in enumerate(topology.dims):
        extent = len({c[a] for c in coords})
        if extent > 1:
            axes.append((extent, dim))
    return Span(tuple(axes))


def _span_factor(chip: Chip, kind: str, n: int, span: Span) -> tuple[float, int, str]:
    """Factor and hops of a collective whose group spans known physical axes."""
    if len(span.axes) == 1:
        extent, dim = span.axes[0]
        wrap = extent == dim and has_wraparound(chip, dim)
        factor, hops, algo = _torus_factor(kind, extent, wrap)
        return factor, hops, f"{algo} (axis of {dim} in the slice)"
    dirs = [2 if (extent == dim and has_wraparound(chip, dim)) else 1 for extent, dim in span.axes]
    hops = sum(math.ceil((e - 1) / 2) if d == 2 else e - 1 for (e, _), d in zip(span.axes, dirs))
    if kind in ("all-gather", "reduce-scatter", "all-reduce"):
        return 1.0 / sum(dirs), hops, (f"rings on {len(span.axes)} torus axes at once ({span.describe()}; "
                                       f"{sum(dirs)} link directions per device)")
    factor, _, algo = _torus_factor(kind, n, False)
    return factor / sum(dirs), hops, f"{algo}, spread over {len(span.axes)} axes ({span.describe()})"


def collective_cost(chip: Chip, kind: str, n: int, in_bytes: float, out_bytes: float,
                    span: Span | None = None) -> CommCost:
    """Traffic and time of one collective over a group of ``n`` devices on ``chip``.

    ``span`` (TPU) says which physical axes the group occupies, from a known slice topology;
    without it the group is taken to lie along one torus axis.
    """
    if n <= 1:
        return CommCost(kind, n, 0.0, 0.0, 1.0, 0, "none", "group of one device: nothing moves", "no traffic")
    sent, sent_text = _sent_bytes(kind, n, in_bytes, out_bytes)
    if chip.kind == "tpu" and span is not None and span.axes:
        w = chip.ici_link_bytes_per_s_oneway or 0.0
        factor, hops, algo = _span_factor(chip, kind, n, span)
        if kind == "all-reduce":
            hops *= 2
        link = "ICI"
    elif chip.kind == "tpu":
        w = chip.ici_link_bytes_per_s_oneway or 0.0
        wrap = has_wraparound(chip, n)
        factor, hops, algo = _torus_factor(kind, n, wrap)
        axes = _torus_axes(chip, n) if kind in ("all-gather", "reduce-scatter", "all-reduce") else 1
        if axes > 1:
            factor /= axes
            algo += f"; spans {axes} torus axes, one ring per axis at once"
        if kind == "all-reduce":
            hops *= 2
        link = "ICI"
    elif chip.kind == "gpu":
        domain = chip.nvlink_domain_devices or 8
        if n <= domain:
            w = chip.nvlink_bytes_per_s_oneway or 0.0
            link, algo = "NVLink", f"NVLink switch: every pair one hop (group of {n} ≤ domain of {domain})"
        else:
            w = chip.network_bytes_per_s_oneway or chip.nvlink_bytes_per_s_oneway or 0.0
            link, algo = "network", f"group of {n} spans NVLink domains of {domain}: limited by the network per GPU"
        factor, hops = 1.0, (n - 1) * (2 if kind == "all-reduce" else 1)
    else:
        w = chip.hbm_bytes_per_s or 0.0
        link, algo = "memory", "devices share host memory: a collective is a memory copy"
        factor, hops = 1.0, 1
    t = sent / w * factor if w > 0 else 0.0
    formula = (f"{kind} over N={n}: comm_bytes = {sent_text} = {fmt_bytes(sent)}; "
               f"T = {fmt_bytes(sent)} / {w:.3g} B/s ({link} one-way) × {factor:.3g} = {t * 1e3:.4g} ms, {hops} hop(s)")
    return CommCost(kind, n, sent, w, factor, hops, link, algo, formula)
