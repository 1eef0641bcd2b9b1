"""How fast does rooflens read HLO? A 50,000-instruction module, against baselines measured
in the same run:

- XLA's own C++ HLO parser (jaxlib's hlo_module_from_text): the speed of light;
- a bare Python line scan (split lines + one regex per line): the floor of any Python reader.

    python bench/bench_hlo_parse.py [--instructions 50000] [--repeat 5]

The module is the real transformer training step shipped with rooflens (1,521 instructions,
collectives in all three replica-group forms), replicated with renamed instructions and
computations until it reaches the requested size.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time

import rooflens as rl
from rooflens.cli.common import example_hlo_path

_NAME = re.compile(r"%([\w.\-]+)")
_LINE = re.compile(r"\s*(?:ROOT\s+)?%?(\S+)\s*=\s*(\S+)\s+([a-z][\w\-]*)\(")


def build_module(target: int) -> str:
    text = example_hlo_path().read_text()
    first = text.index("\n%")  # header and stack-frame tables come before the first computation
    header, body = text[:first], text[first:]
    per_copy = len(rl.hlo.parse(text).instructions())
    copies = max(1, -(-target // per_copy))
    parts = [header, body]
    for k in range(1, copies):
        renamed = _NAME.sub(lambda m, k=k: f"%{m.group(1)}_r{k}", body)
        parts.append(renamed.replace("ENTRY %", "%"))  # one ENTRY only
    return "\n".join(parts)


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--instructions", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    text = build_module(args.instructions)
    module = rl.hlo.parse(text)
    n = len(module.instructions())
    assert not module.warnings, module.warnings[:3]
    print(f"module: {n:,} instructions, {len(module.computations):,} computations, {len(text) / 1e6:.1f} MB of text")

    def line_scan():
        return sum(1 for line in text.splitlines() if _LINE.match(line))

    def cold_parse():
        rl.hlo.parse_shape.cache_clear()  # no help from shapes cached by an earlier run
        return rl.hlo.parse(text)

    results = {"rooflens.hlo.parse": timed(cold_parse, args.repeat),
               "python line scan (floor)": timed(line_scan, args.repeat)}
    try:
        from jax._src.lib import hlo as xla_hlo

        results["XLA C++ parser (jaxlib)"] = timed(lambda: xla_hlo.hlo_module_from_text(text), args.repeat)
    except Exception as e:  # noqa: BLE001 - the baseline is optional
        print(f"(XLA parser baseline unavailable: {e})")

    ours = statistics.median(results["rooflens.hlo.parse"])
    print(f"{'reader':28s} {'median s':>9s} {'min s':>8s} {'µs/instr':>9s} {'rooflens ÷ this':>16s}")
    for name, ts in results.items():
        med = statistics.median(ts)
        print(f"{name:28s} {med:9.3f} {min(ts):8.3f} {1e6 * med / n:9.1f} {ours / med:16.2f}")
    verdict = "meets" if ours < 2.0 else "MISSES"
    print(f"rooflens parses {n:,} instructions in {ours:.2f} s: {verdict} the 2 s target.")


if __name__ == "__main__":
    main()
