"""Hostile inputs and conditions, each through the real command in a fresh process: one sentence on
stderr and exit 2 (no traceback, no "internal error", no abort), --json output that is JSON alone, no
control byte of the data on the terminal, and no file of the user's lost."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import fixture_path

ROOT = Path(__file__).resolve().parents[1]
GEMM_XPLANE = ("gpu_amd", "tracelens_mi300x_jax08_gemm.xplane.pb")


def rooflens(*args: str, cwd: Path | None = None, prefix: tuple[str, ...] = (), timeout: float = 120,
             env: dict | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ, COLUMNS="200", JAX_PLATFORMS="cpu", **(env or {}))
    e.pop("ROOFLENS_DEBUG", None)
    return subprocess.run([*prefix, sys.executable, "-m", "rooflens.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=e, timeout=timeout)


def one_sentence(r: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2 and exactly one line on stderr, starting 'rooflens:', holding ``words``."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert len(lines) == 1, r.stderr
    line = lines[0]
    assert line.startswith("rooflens: ") and "internal error" not in line and "Traceback" not in line, line
    for w in words:
        assert w in line, line
    return line


def _unprivileged() -> tuple[str, ...] | None:
    """A prefix that runs a command without the power to bypass file permissions (as root: the DAC
    capabilities dropped), or None when permissions cannot be made to bite here."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    return (setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--")


# -- item 1: input errors -----------------------------------------------------------------------------

def _deep_tuple_hlo(depth: int = 600) -> str:
    shape = "(" * depth + "f32[2]" + ")" * depth
    return f"HloModule m\n\nENTRY main {{\n  p0 = {shape} parameter(0)\n  ROOT t = f32[2] constant({{1,2}})\n}}\n"


def test_deeply_nested_tuple_hlo_is_refused_in_one_sentence(tmp_path):
    f = tmp_path / "deep.hlo.txt"
    f.write_text(_deep_tuple_hlo())
    one_sentence(rooflens("hlo", str(f)), "nested more than 64 levels", "line 4")
    one_sentence(rooflens("predict", str(f), "--chip", "tpu-v5e"), "nested more than 64 levels")
    # in an operand's shape and in a computation's signature too
    deep = "(" * 300 + "f32[2]" + ")" * 300
    g = tmp_path / "deep_op.hlo.txt"
    g.write_text(f"HloModule m\n\nENTRY main {{\n  p0 = f32[2] parameter(0)\n  ROOT t = f32[2] negate({deep} p0)\n}}\n")
    one_sentence(rooflens("hlo", str(g)), "line 5")
    h = tmp_path / "deep_sig.hlo.txt"
    h.write_text(f"HloModule m\n\nENTRY main (p: {deep}) -> f32[2] {{\n  ROOT t = f32[2] constant({{1,2}})\n}}\n")
    one_sentence(rooflens("hlo", str(h)), "line 3")


def test_a_shallow_tuple_still_parses():
    import rooflens as rl

    s = rl.hlo.parse_shape("(" * 10 + "f32[2]" + ")" * 10)
    assert s.is_tuple and s.bytes == 8


def test_report_hlo_with_a_deep_tuple_is_a_note_not_a_crash(tmp_path):
    hlo = tmp_path / "hlo"
    hlo.mkdir()
    (hlo / "m.after_optimizations.txt").write_text(_deep_tuple_hlo())
    r = rooflens("report", "--no-calibrate", "--json", "--hlo", str(hlo), str(fixture_path(*GEMM_XPLANE)))
    assert r.returncode == 0, r.stderr[-2000:]
    json.loads(r.stdout)


def test_non_utf8_buffer_assignment_in_a_dump(tmp_path):
    (tmp_path / "module_0001.jit_f-buffer-assignment.txt").write_bytes(b"BufferAssignment:\nallocation 0: \xff\xfe\n")
    one_sentence(rooflens("memory", str(tmp_path)), "module_0001.jit_f-buffer-assignment.txt", "not UTF-8")


def test_paths_under_a_directory_that_cannot_be_searched(tmp_path):
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("cannot drop the permission to bypass file modes here")
    locked = tmp_path / "locked"
    (locked / "sub").mkdir(parents=True)
    (locked / "x.hlo").write_text(_deep_tuple_hlo(1))
    (locked / "a.py").write_text("def f(x):\n    return x\n")
    locked.chmod(0)
    try:
        for args in (("report", str(locked / "sub")), ("report", str(locked)), ("memory", str(locked / "sub")),
                     ("hlo", str(locked / "x.hlo")), ("run", str(locked / "a.py")),
                     ("predict", f"{locked / 'a.py'}:f", "--chip", "tpu-v5e"),
                     ("chips", "--chips", str(locked / "c.toml"))):
            line = one_sentence(rooflens(*args, prefix=prefix))
            assert "permission denied" in line and "does not exist" not in line, (args, line)
    finally:
        locked.chmod(0o755)


def test_existing_directories_are_not_called_missing(tmp_path):
    d = tmp_path / "model.py"
    d.mkdir()
    one_sentence(rooflens("predict", f"{d}:f", "--chip", "tpu-v5e"), "is a directory")
    one_sentence(rooflens("chips", "--chips", str(tmp_path)), "is a directory")
    line = one_sentence(rooflens("run", f"{tmp_path}/"))
    assert "does not exist" not in line


def test_devices_and_directories_where_a_file_is_read(tmp_path):
    """/dev/zero never ends: reading it as HLO filled memory until the process was killed."""
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    one_sentence(rooflens("hlo", "/dev/zero", timeout=30), "not a regular file")
    one_sentence(rooflens("memory", "/dev/zero", timeout=30), "not a regular file")
    one_sentence(rooflens("check", "x", "--budget", str(tmp_path)), "is a directory")


def test_a_mesh_larger_than_any_pod_is_refused_before_xla_aborts():
    from rooflens.errors import RooflensError
    from rooflens.lowering import parse_mesh_spec

    assert parse_mesh_spec("data=64,model=128") == {"data": 64, "model": 128}
    with pytest.raises(RooflensError, match="more than any slice or pod"):
        parse_mesh_spec("data=99999999999999")


@pytest.mark.parametrize("spec, words", [
    ("f32[4000000000,4000000000]", ("multiply to", "2^63")),
    ("f32[99999999999999999]", ("more than the memory of any chip",)),
    ("bf16[99999999999999999999]", ("beyond XLA's limit",)),
])
def test_argument_sizes_beyond_any_machine_are_refused_before_jax(tmp_path, spec, words):
    f = tmp_path / "m.py"
    f.write_text("import jax.numpy as jnp\n\ndef f(x):\n    return jnp.sin(x)\n")
    one_sentence(rooflens("predict", f"{f}:f", "--chip", "tpu-v5e", "--arg", spec), *words)


# -- item 2: --json pure ------------------------------------------------------------------------------

def test_predict_json_is_pure_when_the_users_module_prints(tmp_path):
    f = tmp_path / "noisy.py"
    f.write_text("import os\nimport subprocess\nimport sys\n\nimport jax.numpy as jnp\n\n"
                 "print('hello from import')\nos.write(1, b'straight to the descriptor\\n')\n"
                 "subprocess.run([sys.executable, '-c', 'print(\"from a child process\")'])\n\n"
                 "def f(x):\n    print('tracing', x.shape)\n    return jnp.sin(x) * 2\n")
    r = rooflens("predict", f"{f}:f", "--chip", "tpu-v5e", "--arg", "f32[128,256]", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["chip"] == "tpu-v5e" and doc["ops"]
    for said in ("hello from import", "straight to the descriptor", "from a child process", "tracing (128, 256)"):
        assert said in r.stderr, r.stderr


# -- item 3: output safety ----------------------------------------------------------------------------

def test_outputs_are_checked_before_the_analysis(tmp_path):
    trace = str(fixture_path(*GEMM_XPLANE))
    mine = tmp_path / "mine.html"
    mine.write_text("the user's own page")
    ro = tmp_path / "ro"
    ro.mkdir()
    cases = [
        (("--html", "x.html", "--out", "x.html"), ("--html and --out both name",)),
        (("--html", "./x.html", "--out", str(tmp_path / "x.html")), ("both name",)),
        (("--html", "nodir/r.html"), ("does not exist",)),
        (("--html", "/dev/full", "--force"), ("not a regular file",)),
        (("--out", "/dev/full"), ("not a regular file",)),
        (("--html", str(mine)), ("exists", "--force")),
        (("--hlo", str(tmp_path / "nope")), ("does not exist",)),
    ]
    for opts, words in cases:
        one_sentence(rooflens("report", "--no-calibrate", trace, *opts, cwd=tmp_path), *words)
    assert mine.read_text() == "the user's own page"
    assert not (tmp_path / "x.html").exists() and not (tmp_path / "x.json").exists()
    one_sentence(rooflens("diff", "--no-calibrate", trace, trace, "--html", "nodir/d.html", cwd=tmp_path),
                 "does not exist")
    prefix = _unprivileged()
    if prefix is not None:
        ro.chmod(0o555)
        try:
            one_sentence(rooflens("report", "--no-calibrate", trace, "--out", str(ro / "r.json"), prefix=prefix),
                         "permission denied")
        finally:
            ro.chmod(0o755)


def test_demo_out_never_takes_a_users_directory_or_a_bad_path(tmp_path):
    one_sentence(rooflens("demo", "--out", "/dev/null/x"), "cannot create the --out directory")
    from rooflens.cli.common import UserError
    from rooflens.cli.demo import demo_dir

    d = tmp_path / "D"
    d.mkdir()
    (d / "report.json").write_text("mine")
    (d / "notes.txt").write_text("also mine")
    with pytest.raises(UserError, match="not the demo's"):  # the user's files: the demo stops, never elsewhere
        demo_dir(d, force=False)
    one_sentence(rooflens("demo", "--out", str(d)), "already holds files that are not the demo's", "--force")
    assert not (tmp_path / "D-2").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["D"]
    assert demo_dir(tmp_path / "E", force=False) == (tmp_path / "E", False)  # a new directory is used as given
    (tmp_path / "E" / "report.html").write_text("<p>an earlier demo</p>")  # the demo's own previous output
    (tmp_path / "E" / "logs").mkdir()
    assert demo_dir(tmp_path / "E", force=False) == (tmp_path / "E", True)
    assert (d / "report.json").read_text() == "mine" and (d / "notes.txt").read_text() == "also mine"


# -- item 5: numeric options --------------------------------------------------------------------------

@pytest.mark.parametrize("args, option", [
    (("memory", "--estimate", "--params", "nan", "--json"), "--params"),
    (("memory", "--estimate", "--params", "inf", "--json"), "--params"),
    (("memory", "--estimate", "--params", "7e9", "--shards", "0"), "--shards"),
    (("report", "x", "--top", "-5"), "--top"),
])
def test_numeric_options_are_validated_by_their_types(args, option):
    r = rooflens(*args)
    one_sentence(r, option)
    assert r.stdout == ""


def test_every_numeric_option_has_a_bounded_type():
    """In-process (no start-up cost): each verb's numbers are refused by click's own types."""
    from click.testing import CliRunner

    from rooflens.cli import cli

    for args in (("memory", "--estimate", "--params", "-7e9"), ("memory", "--estimate", "--params", "1e300"),
                 ("predict", "m.py:f", "--chip", "tpu-v5e", "--top", "-5"), ("diff", "a", "b", "--top", "-1"),
                 ("calibrate", "--repeats", "1"), ("demo", "--steps", "0"), ("report", "x", "--workers", "0")):
        r = CliRunner().invoke(cli, list(args), standalone_mode=False)
        assert r.exit_code != 0 and type(r.exception).__name__ == "BadParameter", (args, r.exception)


def test_json_never_holds_nan_or_infinity():
    from rooflens.cli.common import json_text

    text = json_text({"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": float("-inf")}})
    assert json.loads(text) == {"a": None, "b": [None, 1.5], "c": {"d": None}}
    r = rooflens("memory", "--estimate", "--params", "7e9", "--json")
    assert r.returncode == 0
    assert "NaN" not in r.stdout and "Infinity" not in r.stdout
    json.loads(r.stdout)
    # past what the fast writer takes (an integer beyond 64 bits), still the same document
    text = json_text({"n": 10**30, "s": "\x9b×", "x": float("nan")})
    assert json.loads(text) == {"n": 10**30, "s": "\x9b×", "x": None} and "\x9b" not in text


def test_a_metadata_file_with_an_integer_past_64_bits(tmp_path):
    _hostile_trace(tmp_path)
    (tmp_path / "rooflens.json").write_text('{"captured_by": "someone", "seed": ' + "9" * 40 + "}")
    r = rooflens("report", "--no-calibrate", "--json", str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["metadata"]["seed"] == int("9" * 40)


# -- item 4: terminal safety --------------------------------------------------------------------------

HOSTILE = "\x1b]0;pwned\x07dot\x1b[31m.1\x9b2J\u202e"


def _hostile_trace(directory: Path, name: str = "h.trace.json.gz") -> Path:
    import gzip

    meta = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}}]
    events = [{"ph": "X", "pid": 1, "tid": 2, "ts": 1.0 + 10 * i, "dur": 2.0, "name": HOSTILE,
               "args": {"hlo_op": HOSTILE, "hlo_module": "jit_\x1b[5mf", "device_ordinal": 0}} for i in range(5)]
    p = directory / name
    p.write_bytes(gzip.compress(json.dumps({"traceEvents": meta + events}).encode()))
    return p


def _no_controls(text: str) -> None:
    for c in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert c not in text, (c, text[:2000])


def test_control_characters_from_data_never_reach_the_terminal(tmp_path):
    trace = _hostile_trace(tmp_path)
    r = rooflens("report", "--no-calibrate", str(trace), "--html", str(tmp_path / "r.html"))
    assert r.returncode == 0, r.stderr[-2000:]
    _no_controls(r.stdout)
    _no_controls(r.stderr)
    assert "\\x1b]0;pwned\\x07dot\\x1b[31m.1\\x9b2J\\u202e" in r.stdout  # shown, as text
    assert "jit_\\x1b[5mf" in r.stdout
    html = (tmp_path / "r.html").read_text()
    assert "pwned" in html and "<script>" in html  # the HTML still carries the name as text
    # a file name holding them, in an error sentence
    line = one_sentence(rooflens("hlo", str(tmp_path / "x\x1b[31m.hlo")), "does not exist")
    _no_controls(line)
    r = rooflens("report", "--no-calibrate", "--json", str(trace))
    json.loads(r.stdout)
    _no_controls(r.stdout)


def test_the_one_escaping_helper():
    from rooflens.report.text import e, escape_controls

    assert e("[bold]x\x1b[0m") == "\\[bold]x\\x1b[0m"
    assert escape_controls("a\nb\tc\x00", keep_lines=True) == "a\nb\tc\\x00"
    assert escape_controls("a\nb") == "a\\x0ab"
    assert e("fusion.3") == "fusion.3" and e("layer_0/attention/bsd,dhk->bshk") == "layer_0/attention/bsd,dhk->bshk"


# -- item 6: rl.capture when the user's code raises ---------------------------------------------------

def test_capture_keeps_the_trace_with_its_hlo_when_user_code_raises(tmp_path):
    import jax.numpy as jnp

    import rooflens as rl

    class Boom(Exception):
        pass

    calls = []

    def feed(out, args):
        calls.append(1)
        if len(calls) == 3:  # the warm-up is call 1; steps 0 and 1 follow
            raise Boom("the user's code failed")
        return args

    with pytest.raises(Boom):
        rl.capture(lambda x: jnp.sin(x) * 2, jnp.ones(64), steps=5, logdir=tmp_path, feed=feed)
    runs = list((tmp_path / "plugins" / "profile").iterdir())
    assert len(runs) == 1 and list(runs[0].glob("*.xplane.pb"))
    hlo = list((runs[0] / "hlo").glob("*.txt"))
    assert len(hlo) == 1 and hlo[0].read_text().startswith("HloModule")
    prof = rl.load(runs[0])
    assert prof.hlo_texts and prof.modules  # the kept trace reads with its program


def test_traces_too_far_apart_for_one_time_axis(tmp_path):
    """Two captures decades apart (one with no wall-clock origin) in one directory: one sentence, not
    an int64 overflow."""
    import gzip

    meta = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}}]
    for host, ts in (("a", 1.0), ("b", 1.7e15)):  # µs: 1970 and 2023
        events = [{"ph": "X", "pid": 1, "tid": 2, "ts": ts + 10 * i, "dur": 2.0, "name": "dot.1",
                   "args": {"hlo_op": "dot.1", "hlo_module": "jit_f", "device_ordinal": 0}} for i in range(3)]
        (tmp_path / f"{host}.trace.json.gz").write_bytes(gzip.compress(json.dumps({"traceEvents": meta + events}).encode()))
    one_sentence(rooflens("report", "--no-calibrate", str(tmp_path)), "days apart")
