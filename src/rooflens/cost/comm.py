"""Collective traffic and time on a chip's interconnect: a bandwidth term and a latency term.

``comm_bytes`` is what one device must send over its links. With ``N`` devices in a group and
``V`` the per-device buffer (the gathered output for an all-gather, the input otherwise):

======================  =========================  ==========================================
collective              comm_bytes                 rings (TPU torus; NCCL/RCCL on GPUs)
======================  =========================  ==========================================
all-gather              (N−1)/N · V_out            N−1 ring steps one way; on a torus axis with
reduce-scatter          (N−1)/N · V_in             wraparound both directions carry chunks:
all-reduce (= RS + AG)  2 · (N−1)/N · V            ⌈(N−1)/2⌉ hops (an all-reduce: twice that)
all-to-all              (N−1)/N · V                ring: mean shortest distance / 2 per link
collective-permute      V                          one hop to a neighbour (point to point)
======================  =========================  ==========================================

**TPU (ICI), the scaling book's rule.** A group occupies one or more torus axes of the slice (given
with ``--topology``, else the chip's published slice for the program's device count, else one axis).
Each axis it spans adds its links: one direction, or two where the axis is whole and has its
wraparound. The bandwidth term is ``T_bw = F · V / (W_link · Σ directions)`` with ``F`` the larger of
the receive bound ``(N−1)/N`` and each axis ring's own efficiency (``2⌈(n−1)/2⌉/n`` with wraparound,
``(n−1)/n`` without), so that one wrapped axis gives the book's ``V / W_bidi`` and the book's
multi-axis ``V / (W_bidi · n_axes)`` follows. Every hop also costs ``T_min`` (≈ 1 µs, the chip's
``ici_hop_latency_s``) whatever its size; the hops are summed over the axes (⌈(n−1)/2⌉ per
wrapped axis, n−1 per line). A ring moves its chunks hop by hop, so (as in the book)
``T = max(hops · T_min, T_bw)``; a point-to-point transfer is pipelined, ``T = hops · T_min + T_bw``.

**GPU (NVLink through NVSwitch; AMD Infinity Fabric, every pair linked).** NCCL's and RCCL's own
cost model (``src/graph/tuning.cc``): ``T = base + steps · hop + comm_bytes / (W · efficiency)`` for
each protocol, the cheapest taken: LL has a small latency but a fraction of the bandwidth, Simple the
whole bandwidth and a larger latency. A ring has N−1 steps (all-reduce 2(N−1)); steps that cross
nodes pay the network's step latency. ``W`` is the GPU's whole NVLink bandwidth one way behind a
switch; on a fully connected AMD board a device reaches the others over min(N−1, links) links.
Beyond the scale-up domain the network per GPU limits the bandwidth.

On the CPU (``local``) the "devices" share memory, so a collective costs a memory copy at the
calibrated memory bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rooflens.errors import RooflensError
from rooflens.hardware import Chip
from rooflens.units import fmt_bytes, fmt_g, plural

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute", "collective-broadcast",
         "send", "recv")
POINT_TO_POINT = ("collective-permute", "send", "recv")
RINGS = ("all-gather", "reduce-scatter", "all-reduce")


@dataclass(frozen=True, slots=True)
class CommCost:
    kind: str
    group_size: int
    comm_bytes: float  # bytes each device sends over its links
    link_bytes_per_s: float
    factor: float  # algorithm/topology factor applied to comm_bytes / link_bytes_per_s
    hops: int  # sequential link steps (the latency count)
    link: str  # which link: "ICI", "NVLink", "Infinity Fabric", "network", "memory"
    algorithm: str  # in words, with the assumption
    formula: str
    t_bandwidth_s: float = 0.0  # the bytes over the links
    t_latency_s: float = 0.0  # hops × per-hop latency (+ a collective's fixed cost on GPUs)
    combine: str = "max"  # how the two terms make the time: "max" (TPU ring) or "sum" (pipelined, NCCL)

    @property
    def t_comm_s(self) -> float:
        if self.combine == "sum":
            return self.t_bandwidth_s + self.t_latency_s
        return max(self.t_bandwidth_s, self.t_latency_s)

    @property
    def latency_bound(self) -> bool:
        return self.t_latency_s > self.t_bandwidth_s


# -- where a group sits on a TPU slice -------------------------------------------------------------

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
    """The torus axes one group of devices occupies: (extent, axis length) per spanned axis, and the
    whole slice's shape when it is known (it decides wraparound on v4/v5p)."""

    axes: tuple[tuple[int, int], ...]
    slice_dims: tuple[int, ...] = ()
    how: str = ""  # how the placement was found, for the explanation
    one_way: bool = False  # the ring runs one direction only (XLA's UniDirection1DRingStrategy)

    def describe(self) -> str:
        return " × ".join(f"{e} of {d}" for e, d in self.axes)


def group_span(topology: Topology, group: tuple[int, ...]) -> Span:
    """The axes ``group`` (device ids) spans on a known slice."""
    coords = [topology.coords(d) for d in group]
    axes = []
    for a, dim in enumerate(topology.dims):
        extent = len({c[a] for c in coords})
        if extent > 1:
            axes.append((extent, dim))
    return Span(tuple(axes), topology.dims, f"device ids on the {topology} slice")


def place_group(chip: Chip, n: int, slice_dims: tuple[int, ...] | None = None) -> Span:
    """Where a group of ``n`` devices sits when only its size is known.

    On a known slice (the chip's published shape for the program's device count) the group takes
    whole axes, as ``jax.make_mesh`` lays mesh axes on physical ones: an axis of exactly ``n``; else
    whole axes, longest first, whose lengths divide ``n``, and what remains as a line on the shortest
    free axis long enough. Without a slice the group is a line of ``n`` on one axis (several axes of
    the chip's longest length when it is longer).
    """
    if n <= 1:
        return Span((), tuple(slice_dims or ()), "one device")
    if slice_dims:
        shape = _shape(slice_dims)
        if n in slice_dims:
            return Span(((n, n),), tuple(slice_dims), f"one whole axis of the {shape} slice")
        free = sorted((d for d in slice_dims if d > 1), reverse=True)
        axes, rest = [], n
        for d in list(free):
            if rest > 1 and rest % d == 0:
                axes.append((d, d))
                free.remove(d)
                rest //= d
        if rest > 1:  # what no whole axis divides: a line on the shortest free axis long enough
            fit = sorted(d for d in free if d >= rest)
            if fit:
                axes.append((rest, fit[0]))
                rest = 1
        if rest == 1 and axes:
            return Span(tuple(axes), tuple(slice_dims), f"whole axes of the {shape} slice, longest first")
    longest = chip.max_axis_devices or n
    if n <= longest or longest <= 1:
        return Span(((n, n),), (), "one torus axis (no slice shape known)")
    axes, rest = [], n
    for _ in range(chip.torus_dims or 1):
        if rest <= 1:
            break
        e = min(rest, longest)
        axes.append((e, longest))
        rest = math.ceil(rest / e)
    return Span(tuple(axes), (), f"axes of {longest} devices (no slice shape known)")


def _shape(dims) -> str:
    return "x".join(map(str, dims))


def has_wraparound(chip: Chip, n: int, slice_dims: tuple[int, ...] = ()) -> bool:
    """Whether a whole torus axis of ``n`` devices has its wraparound link (per the chip's rule)."""
    if n <= 2:
        return False  # two devices share one link pair: nothing to wrap around
    rule = chip.wraparound or "none"
    if rule == "always":
        return True
    if rule == "full-axis":
        return chip.max_axis_devices is not None and n >= chip.max_axis_devices
    if rule == "multiple-of-4":
        return n % 4 == 0
    if rule == "full-cube":  # optical wraparounds exist only on slices made of whole 4x4x4 cubes
        return n % 4 == 0 and all(d % 4 == 0 for d in slice_dims)
    return False


# -- bytes -------------------------------------------------------------------------------------------

def _sent_bytes(kind: str, n: int, in_bytes: float, out_bytes: float) -> tuple[float, float, str]:
    """(comm_bytes each device sends, V the array the ring moves, the formula in words)."""
    frac = (n - 1) / n
    if kind == "all-gather":
        return frac * out_bytes, out_bytes, f"(N−1)/N × {fmt_bytes(out_bytes)} gathered"
    if kind == "reduce-scatter":
        return frac * in_bytes, in_bytes, f"(N−1)/N × {fmt_bytes(in_bytes)} input"
    if kind == "all-reduce":
        return 2 * frac * in_bytes, 2 * in_bytes, f"2 × (N−1)/N × {fmt_bytes(in_bytes)} (reduce-scatter + all-gather)"
    if kind == "all-to-all":
        return frac * in_bytes, in_bytes, f"(N−1)/N × {fmt_bytes(in_bytes)} input"
    return in_bytes, in_bytes, f"{fmt_bytes(in_bytes)} sent"


# -- TPU ---------------------------------------------------------------------------------------------

def _line_all_to_all(n: int, wrap: bool) -> tuple[float, int, str]:
    if wrap:
        load = sum(min(d, n - d) for d in range(1, n)) / 2  # chunks per directed link
        return load / (n - 1), n // 2, "bidirectional ring (wraparound): shortest way round"
    load = (n // 2) * (n - n // 2)  # chunks crossing the middle link one way
    return load / (n - 1), n - 1, "line (no wraparound): the middle link carries N²/4 chunks"


def _tpu(chip: Chip, kind: str, n: int, sent: float, span: Span) -> tuple[float, int, str]:
    """(factor on sent / W, hops, the algorithm in words) on the axes ``span`` names."""
    if kind in POINT_TO_POINT or kind == "collective-broadcast":
        return 1.0, 1, "one hop to a neighbour"
    axes = span.axes or ((n, n),)
    wraps = [e == d and not span.one_way and has_wraparound(chip, d, span.slice_dims) for e, d in axes]
    dirs = [2 if w else 1 for w in wraps]
    hops = sum(math.ceil((e - 1) / 2) if w else e - 1 for (e, _), w in zip(axes, wraps))
    where = f"{span.how}: {span.describe()}" if span.how else span.describe()
    if kind == "all-to-all":
        if len(axes) == 1:
            factor, hops, algo = _line_all_to_all(axes[0][0], wraps[0])
            return factor, hops, f"{algo} ({where})"
        factor, _, algo = _line_all_to_all(n, False)
        return factor / sum(dirs), hops, f"{algo}, spread over {len(axes)} axes ({where})"
    ring = [(2 * math.ceil((e - 1) / 2) / e) if w else (e - 1) / e for (e, _), w in zip(axes, wraps)]
    eff = max([(n - 1) / n, *ring])
    factor = eff / ((n - 1) / n) / sum(dirs)
    if kind == "all-reduce":
        hops *= 2
    if len(axes) == 1:
        algo = (f"bidirectional ring with wraparound ({where}): {plural(hops, 'hop')}, half the chunks each way"
                if wraps[0]
                else f"no wraparound ({where}): {plural(hops, 'hop')} in a line, each end receives on one link")
    else:
        algo = (f"rings on {len(axes)} torus axes at once ({where}; {sum(dirs)} link directions per device, "
                f"{plural(hops, 'hop')} summed over the axes)")
    return factor, hops, algo


# -- GPU ---------------------------------------------------------------------------------------------

def _gpu_steps(kind: str, n: int) -> int:
    if kind == "all-reduce":
        return 2 * (n - 1)
    if kind in ("all-gather", "reduce-scatter", "collective-broadcast"):
        return n - 1
    return 1  # all-to-all, permute, send/recv: every pair at once, point to point


def _gpu(chip: Chip, kind: str, n: int, sent: float) -> CommCost:
    domain = chip.scaleup_domain_devices or 8
    steps = _gpu_steps(kind, n)
    if n <= domain:
        w = chip.scaleup_bytes_per_s_oneway(n) or 0.0
        link = chip.scaleup_link
        if link == "Infinity Fabric":
            used = max(1, min(n - 1, int(chip.value("interconnect.infinity_fabric_links", 1))))
            where = (f"fully connected board: each GPU reaches the group over {plural(used, 'link')} (group of {n} ≤ "
                     f"{domain})")
        else:
            where = f"NVLink switch: every pair one hop (group of {n} ≤ domain of {domain})"
        inter = 0
    else:
        nodes = math.ceil(n / domain)
        w = chip.network_bytes_per_s_oneway or 0.0
        link = "network"
        where = f"group of {n} spans {nodes} {chip.scaleup_link} domains of {domain}: limited by the network per GPU"
        if not w:
            w = chip.scaleup_bytes_per_s_oneway(domain) or 0.0
            where += " (no network bandwidth published for this chip: priced at its scale-up link)"
        inter = min(steps, 2 * (nodes - 1) if kind == "all-reduce" else nodes - 1)
    options = []
    for proto, eff in (("LL", chip.ll_bandwidth_fraction), ("Simple", 1.0)):
        lat = chip.collective_latency(proto.lower())
        if lat is None:
            continue
        base, hop, net = lat
        t_lat = base + (steps - inter) * hop + inter * net
        t_bw = sent / (w * eff) if w and sent else 0.0
        options.append((t_lat + t_bw, proto, eff, t_lat, t_bw))
    if options:
        _, proto, eff, t_lat, t_bw = min(options)
        algo = (f"{where}; ring of {plural(steps, 'step')}, protocol {proto} (the cheaper of NCCL/RCCL's LL and "
                "Simple): "
                f"base + steps × step latency + bytes / ({eff:g} × bandwidth)")
    else:
        proto, eff, t_lat = "", 1.0, 0.0
        t_bw = sent / w if w and sent else 0.0
        algo = f"{where}; the chip publishes no collective latency, so none is priced"
    hops = steps
    formula = (f"{kind} over N={n}: comm_bytes = {fmt_bytes(sent)}; T_bw = {fmt_bytes(sent)} / ({eff:g} × "
               f"{fmt_g(w, 3)} B/s "
               f"{link} one-way) = {fmt_g(t_bw * 1e6)} µs; T_lat = {fmt_g(t_lat * 1e6)} µs ({plural(hops, 'step')}"
               f"{f', protocol {proto}' if proto else ''}); T = T_lat + T_bw = {fmt_g((t_lat + t_bw) * 1e6)} µs")
    return CommCost(kind, n, sent, w, 1.0 / eff, hops, link, algo, formula, t_bw, t_lat, "sum")


def collective_cost(chip: Chip, kind: str, n: int, in_bytes: float, out_bytes: float,
                    span: Span | None = None) -> CommCost:
    """Traffic, bandwidth time and latency of one collective over a group of ``n`` devices on ``chip``.

    ``span`` (TPU) says which physical axes the group occupies (:func:`group_span` on a known slice,
    :func:`place_group` from the group's size); without it the group is a line of ``n`` on one axis.
    """
    if n <= 1:
        return CommCost(kind, n, 0.0, 0.0, 1.0, 0, "none", "group of one device: nothing moves", "no traffic")
    sent, _, sent_text = _sent_bytes(kind, n, in_bytes, out_bytes)
    if chip.kind == "gpu":
        return _gpu(chip, kind, n, sent)
    if chip.kind != "tpu":
        w = chip.hbm_bytes_per_s or 0.0
        t = sent / w if w else 0.0
        return CommCost(kind, n, sent, w, 1.0, 1, "memory", "devices share host memory: a collective is a memory copy",
                        f"{kind} over N={n}: {fmt_bytes(sent)} copied at {fmt_g(w, 3)} B/s = {fmt_g(t * 1e6)} µs",
                        t, 0.0)
    if span is None or not span.axes:
        span = place_group(chip, n)
    w = chip.ici_link_bytes_per_s_oneway or 0.0
    factor, hops, algo = _tpu(chip, kind, n, sent, span)
    t_bw = sent / w * factor if w else 0.0
    t_hop = chip.ici_hop_latency_s
    t_lat = hops * t_hop if t_hop else 0.0
    combine = "sum" if kind in POINT_TO_POINT else "max"
    rule = ("T = hops × T_min + T_bw (a point-to-point transfer is pipelined)" if combine == "sum"
            else "T = max(hops × T_min, T_bw) (each ring hop costs max(T_min, its bytes / bandwidth))")
    lat_text = (f"T_lat = {plural(hops, 'hop')} × {fmt_g(t_hop * 1e6, 3)} µs = {fmt_g(t_lat * 1e6)} µs" if t_hop
                else "the chip publishes no per-hop latency: none priced")
    t = t_bw + t_lat if combine == "sum" else max(t_bw, t_lat)
    formula = (f"{kind} over N={n}: comm_bytes = {sent_text} = {fmt_bytes(sent)}; "
               f"T_bw = {fmt_bytes(sent)} / {fmt_g(w, 3)} B/s (ICI one-way) × {fmt_g(factor, 3)} = "
               f"{fmt_g(t_bw * 1e6)} µs; "
               f"{lat_text}; {rule} = {fmt_g(t * 1e6)} µs")
    return CommCost(kind, n, sent, w, factor, hops, "ICI", algo, formula, t_bw, t_lat, combine)
