"""The network levels a plan runs over, from the chip catalogue: ICI inside a TPU slice or pod and DCN between
pods; NVLink inside a GPU's switch domain and the network beyond it (or Infinity Fabric on AMD boards).

Bandwidths follow the scaling book's conventions: on a TPU, W_ici is a link's *bidirectional* bandwidth
("For TPUv5p, C=4.6e14 and W=2 * 9e10 for 1D data parallelism over ICI", training.md, 'Data Parallelism'),
multiplied by the mesh axes a collective spans; W_dcn is the catalogue's DCN bytes/s per chip ("Scaling Between
Pods": 2.5e10 per host of 4 chips). Through an NVLink switch a GPU sends and receives at its one-way NVLink
bandwidth at once, so a ring collective there moves V at W = the one-way figure (no second ring direction).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from rooflens.errors import RooflensError
from rooflens.hardware import Chip


@dataclass(frozen=True)
class Level:
    """One level of the network: what a group of up to ``devices`` chips communicates over."""

    name: str  # ICI, DCN, NVLink, Infinity Fabric, network
    devices: int  # chips one group at this level can span (0: unbounded)
    bytes_per_s: float  # W per chip as the book's formulas take it
    axes: int  # mesh axes a collective can spread over at this level (TPU torus axes; 1 elsewhere)
    source: str

    def to_dict(self) -> dict:
        return asdict(self)


def parse_topology(topology: str | tuple | None) -> tuple[int, ...] | None:
    if topology is None or topology == "":
        return None
    if isinstance(topology, tuple | list):
        dims = tuple(int(d) for d in topology)
    else:
        try:
            dims = tuple(int(d) for d in str(topology).lower().split("x"))
        except ValueError:
            raise RooflensError(f"topology {topology!r} is not a slice shape like 4x4 or 16x16x16.") from None
    if not dims or any(d < 1 for d in dims):
        raise RooflensError(f"topology {topology!r} is not a slice shape like 4x4 or 16x16x16.")
    return dims


def pod_devices(chip: Chip, chips: int) -> int:
    """Chips in one ICI domain: the TPU pod size from the catalogue (the whole job when not published)."""
    pod = chip.value("topology.pod_devices") if chip.kind == "tpu" else None
    return int(pod) if pod else chips


def ici_axes(chip: Chip, devices: int, topology: tuple[int, ...] | None) -> tuple[tuple[int, ...] | None, int]:
    """The slice shape and how many of its axes have more than one chip (at least 1)."""
    shape = topology or chip.default_slice(devices)
    if shape is None:  # no published slice of that size: a torus uses all its axes once each has 2 chips
        dims = int(chip.torus_dims or 1)
        return None, max(1, min(dims, int(math.log2(max(devices, 1)))))
    return shape, max(1, sum(1 for d in shape if d > 1))


def levels(chip: Chip, chips: int, topology: tuple[int, ...] | None = None) -> tuple[Level, ...]:
    """The inner level (ICI / NVLink / Infinity Fabric) and the outer one (DCN / network) for ``chips``."""
    if chip.kind == "tpu":
        link = chip.ici_link_bytes_per_s_oneway
        if not link:
            raise RooflensError(f"chip {chip.name} has no ICI bandwidth in the catalogue; a plan needs one.")
        pod = pod_devices(chip, chips)
        _, axes = ici_axes(chip, min(chips, pod), topology)
        inner = Level("ICI", pod, 2.0 * link, axes, chip.source("interconnect.ici_link_bytes_per_s_oneway")
                      + " (x 2: the book's W_ici is a link's bidirectional bandwidth)")
        dcn = chip.value("interconnect.dcn_bytes_per_s")
        outer = Level("DCN", 0, float(dcn or 0.0), 1, chip.source("interconnect.dcn_bytes_per_s"))
        return inner, outer
    domain = chip.scaleup_domain_devices or 1
    scale_up = chip.scaleup_bytes_per_s_oneway(min(chips, domain))
    net = chip.network_bytes_per_s_oneway
    inner = Level(chip.scaleup_link, domain, float(scale_up or 0.0), 1,
                  chip.source("interconnect.nvlink_bytes_per_s_oneway") or chip.scaleup_link)
    outer = Level("network", 0, float(net or 0.0), 1, chip.source("interconnect.network_bytes_per_s_oneway"))
    return inner, outer


def bandwidth_for(group: int, inner: Level, outer: Level, chip: Chip) -> tuple[float, int, str]:
    """(W, axes, level name) a collective over ``group`` chips runs at: the inner level when the group fits in
    it, else the outer one (a GPU's network beyond its NVLink domain)."""
    if chip.kind == "tpu" or group <= inner.devices or not outer.bytes_per_s:
        return inner.bytes_per_s, inner.axes, inner.name
    return outer.bytes_per_s, 1, outer.name


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})
