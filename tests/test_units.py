"""How rooflens writes quantities (rooflens.units), on its boundaries, and a sweep of what the CLI prints
for the real fixtures: no exponent, no ``None``, no ``(s)`` plural, no float printed raw."""

import math
import re

import pytest
from click.testing import CliRunner

from rooflens.units import (
    fmt_bytes,
    fmt_count,
    fmt_named,
    fmt_number,
    fmt_percent,
    fmt_ratio,
    fmt_ratio_range,
    fmt_seconds,
    fmt_si,
    plural,
)
from tests.conftest import FIXTURES, fixture_path


@pytest.mark.parametrize("seconds, text", [
    (0.000999981, "1 ms"),  # issue 38: was "1e+03 µs"; the unit is picked after rounding
    (0.0009994, "999 µs"),
    (0.9999996, "1 s"),
    (0.0893, "89.3 ms"),
    (3.4e-5, "34 µs"),
    (5e-10, "500 ps"),
    (2.5e-9, "2.5 ns"),
    (0, "0 s"),
    (-0.002, "-2 ms"),
    (78.2, "78.2 s"),
    (999.7, "16.7 min"),  # rounds to 1000 s: past seconds
    (7200, "2 h"),
    (3 * 86400, "3 d"),
    (1e12, "11,600,000 d"),  # huge: digits with separators, never an exponent
])
def test_seconds_on_their_boundaries(seconds, text):
    assert fmt_seconds(seconds) == text


def test_unknown_is_never_a_number():
    for f in (fmt_seconds, fmt_bytes, fmt_percent, fmt_ratio, fmt_number):
        assert f(None) == "—" and f(math.nan) == "—"
    assert fmt_seconds(None, missing="unknown") == "unknown" and fmt_si(None, "FLOP/s") == "—"


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (512, "512 B"), (999.6, "1 kB"), (2048, "2.05 kB"), (4.19e6, "4.19 MB"), (67108864, "67.1 MB"),
    (80e9, "80 GB"), (1e15, "1 PB"), (1e20, "100,000 PB"),
])
def test_bytes_are_decimal_everywhere(n, text):
    assert fmt_bytes(n) == text


def test_rates_ratios_shares_and_counts():
    assert fmt_si(4.5e10, "B/s") == "45 GB/s" and fmt_si(1.97e14, "FLOP/s") == "197 TFLOP/s"
    assert fmt_si(1e25, "FLOP") == "10,000,000 EFLOP"
    assert fmt_ratio(1.2549) == "1.25×" and fmt_ratio(232.67) == "233×" and fmt_ratio(1974.7) == "1,975×"
    assert fmt_ratio_range(19.02, 19.04) == "19×"  # issue 38: "19–19×"
    assert fmt_ratio_range(2.1, 19) == "2.1–19×"
    assert fmt_percent(0.346) == "34.6%" and fmt_percent(0.0004) == "0.04%" and fmt_percent(1e-7) == "<0.01%"
    assert fmt_percent(0) == "0%"
    assert plural(1, "collective") == "1 collective" and plural(9, "collective") == "9 collectives"
    assert fmt_count(15e12, "tokens") == "15 trillion tokens" and fmt_count(15625, "tokens") == "15,625 tokens"
    assert fmt_number(45000000000.0) == "45,000,000,000" and fmt_number(0.34123) == "0.341"


def test_catalogue_figures_in_the_units_their_names_carry():
    assert fmt_named("interconnect.ici_link_bytes_per_s_oneway", 4.5e10) == "45 GB/s"  # issue 38: 45000000000.0
    assert fmt_named("interconnect.ici_hop_latency_s", 1e-6) == "1 µs"
    assert fmt_named("peak_flops_per_s.bf16", 1.97e14) == "197 TFLOP/s"
    assert fmt_named("memory.shared_memory_bytes_per_sm", 233472) == "233.5 kB per SM"
    assert fmt_named("memory.hbm_bytes", 16e9) == "16 GB"
    assert fmt_named("topology.slices", ((1, 1), (2, 4))) == "1x1, 2x4"
    assert fmt_named("interconnect.ll_bandwidth_fraction", 0.5) == "50.0%"


# -- the sweep: what the CLI prints for real inputs ---------------------------------------------------------

RAW = [
    (re.compile(r"\d[eE][+-]\d"), "an exponent as Python writes it"),  # a cited source's own "8.1e11" stays
    (re.compile(r"\bNone\b"), "None"),
    (re.compile(r"\w\(s\)"), "a '(s)' plural"),
    (re.compile(r"\d\.\d{7,}"), "a float printed raw"),
    (re.compile(r"(?<![\w.:/-])\d{7,}(?![\w.])"), "a long number without separators"),
    (re.compile(r"x<=|x>="), "a raw click range"),
]


def raw_numbers(text: str) -> list[str]:
    """The lines a person should not have to read: see RAW. File paths (fixture names carry '6e-4', hashes)
    and HLO text quoted as it is are set aside first."""
    bad = []
    for line in text.replace(str(FIXTURES), "FIXTURES").splitlines():
        line = re.sub(r"\S*(FIXTURES|/tmp/|\.py|\.pb|\.txt|\.json|\.gz|\.sqlite|\.zip)\S*", "PATH", line)
        line = re.sub(r"\w+\[[\d,]*\](\{[^}]*\})?", "SHAPE", line)  # f32[3,5]{1,0}: HLO's own spelling
        bad += [f"{why}: {line.strip()}" for pattern, why in RAW if pattern.search(line)]
    return bad


def cli(*args: str) -> str:
    from rooflens.cli import cli as group

    r = CliRunner().invoke(group, list(args), env={"COLUMNS": "100"}, catch_exceptions=False)
    assert r.exit_code == 0, r.output[-2000:]
    return r.output


@pytest.mark.parametrize("args", [
    ("chips",), ("hlo", "--example"), ("hlo", "--example", "--op", "ynn_fusion.3"),
    ("memory", "--estimate", "--params", "7e9", "--optimizer", "adam", "--chip", "h100-sxm"),
    ("plan", "--model", "llama3-8b", "--chip", "tpu-v5p", "--chips", "64", "--batch-tokens", "1e6",
     "--tokens", "15e12"),
    ("plan", "--model", "llama3-70b", "--chip", "tpu-v5e", "--chips", "8", "--decode", "--batch", "32",
     "--context", "8192", "--kv-dtype", "int8", "--param-dtype", "int8"),
])
def test_cli_writes_numbers_as_people_do(args):
    assert not raw_numbers(cli(*args))


@pytest.mark.parametrize("name", ["tpu-v5e", "tpu-v4", "h100-sxm", "mi300x", "b200"])
def test_chip_figures_in_their_units(name):
    """``rooflens chips NAME``: each figure's value in its unit (the sources quoted beside it keep their own
    spelling, ``8.1e11`` included)."""
    out = cli("chips", name)
    values = [line.split("│")[2].strip() for line in out.splitlines() if line.startswith("│")]
    values = [v for v in values if v]
    assert values and not raw_numbers("\n".join(values)), raw_numbers("\n".join(values))
    assert not any(re.fullmatch(r"[\d.]+", v) and float(v) >= 1e4 for v in values)  # a rate or size with no unit


@pytest.mark.parametrize("parts", [
    ("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb"),
    ("gpu_amd", "tracelens_mi300x_jax08_gemm.xplane.pb"),
    ("gpu_amd", "tracelens_mi300x_jax_conv_minimal_legacy.xplane.pb"),
    ("gpu_nvidia", "nsys_sqlite", "nsysai_pytorch_h100x2_1s.sqlite"),
])
def test_report_of_real_traces_writes_numbers_as_people_do(parts):
    out = cli("report", "--no-calibrate", str(fixture_path(*parts)))
    assert not raw_numbers(out), raw_numbers(out)[:10]


def test_help_texts_name_their_ranges():
    from rooflens.cli import VERBS

    for verb in VERBS:
        text = cli(verb.name, "--help")
        assert "None" not in text and not re.search(r"\d\.0\]", text), (verb.name, text)
    assert "x<=None" not in cli("run", "--help")
    assert "[0<x<=1e15]" in cli("memory", "--help")


def test_terminal_tables_keep_op_names_whole_at_100_columns():
    """Issue 38: at 100 columns every op read ``input_…`` or ``all-reduc…``: names are what a reader looks
    for, so the other columns give way (and the ones left out are named)."""
    import rooflens as rl
    from rooflens.trace import op_stats

    path = fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb")
    out = cli("report", "--no-calibrate", str(path))
    names = {s.name for s in op_stats(rl.load(path)).op_stats}
    table = out[out.index("HLO ops by self time"):out.index("left out at 100 columns")]
    shown = {line.split("│")[1].strip() for line in table.splitlines() if line.startswith("│")}
    assert shown == names and not any("…" in s for s in shown)  # each whole, so each distinguishable
    assert all(len(line) <= 100 for line in out.splitlines() if line.startswith(("│", "┃", "┏", "└")))
    assert "left out at 100 columns:" in out


@pytest.mark.parametrize("path, user", [
    ("/home/me/project/train.py", True),
    ("/usr/local/lib/python3.10/dist-packages/flax/linen/module.py", True),  # a library the user calls
    ("/home/me/rooflens/src/rooflens/capture/capture.py", False),
    ("/opt/venv/lib/python3.12/site-packages/rooflens/cli/demo.py", False),
    ("/opt/venv/lib/python3.12/site-packages/rooflens/workloads.py", True),  # the demo's own workload
    ("/opt/venv/lib/python3.12/site-packages/click/core.py", False),
    ("/usr/lib/python3.11/runpy.py", False),
    ("<frozen runpy>", False),
    ("/usr/lib/python3/dist-packages/_pytest/python.py", False),
])
def test_source_frames_of_the_tool_are_not_the_users(path, user):
    from rooflens.hlo.explain import is_user_frame

    assert is_user_frame(path) is user


def test_memory_views_rank_programs_and_sum_up_the_small_ones():
    """Issue 38: the memory section was dominated by 8-byte eager programs. The step program and the large
    ones are shown; the rest is one line with their count and range (real compiled programs' figures)."""
    import io

    import jax
    import jax.numpy as jnp
    from rich.console import Console

    from rooflens.memory.compiled import compiled_memory
    from rooflens.memory.summary import summarize
    from rooflens.report.memory_view import render_memory
    from rooflens.report.text import ranked_programs

    def stats(f, *args):
        m = jax.jit(f).lower(*args).compile().memory_analysis()
        return {k: getattr(m, k) for k in ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
                                           "temp_size_in_bytes", "generated_code_size_in_bytes")}

    step = compiled_memory("jit_step", stats(lambda w, x: jnp.tanh(x @ w) @ w.T, jnp.ones((512, 512)),
                                             jnp.ones((256, 512))))
    eager = [compiled_memory(f"jit_eager_{i}", stats(lambda x, i=i: x + i, jnp.float32(i))) for i in range(5)]
    assert all(p.peak_bytes <= 16 for p in eager) and step.peak_bytes > 1e6  # what XLA itself says
    mem = summarize([*eager, step], main_program="jit_step")
    shown, rest, line = ranked_programs(mem.programs, mem.main_program)
    assert [p.program for p in shown] == ["jit_step"] and len(rest) == 5
    assert line.startswith("5 more programs not shown, with compiled peaks of ")
    out = io.StringIO()
    render_memory(Console(file=out, width=100), mem, "test")
    text = out.getvalue()
    assert "jit_step: arguments" in text and "jit_eager_0: arguments" not in text and "5 more programs" in text
