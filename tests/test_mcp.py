"""`rooflens mcp` through the MCP SDK's own client over stdio, as an agent's client starts it.

One server session (`python -m rooflens mcp`, in a scratch working directory, this checkout's src on
the path, no network) makes the calls in order, the way an agent would: the tool list; every tool on
the real fixtures; a bad path and then more calls on the same session; the book's matmul on a TPU
v5e; a real script profiled end to end and its profile reported; a run past its timeout. The tests
then check each answer against the command line's own output for the same input (a separate
process), against arithmetic done here, or against the trace's own facts.
"""

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from tests.conftest import IN_CI, fixture_path

try:
    import mcp.server.mcpserver  # noqa: F401
except ImportError:
    if IN_CI:  # CI installs .[test], which has the SDK: these tests must run there
        raise
    pytest.skip("the MCP SDK is not installed (pip install 'rooflens[mcp]')", allow_module_level=True)

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"
SCRIPTS = Path(__file__).parent / "run_scripts"
TOOLS = {"report", "op", "predict", "plan", "diff", "check", "hlo", "run", "chips"}
DEFAULT_MAX_BYTES = 24_000  # what docs/agents.md promises for a report page
BOOK_ARGS = ["bf16[32,1024,8192]", "bf16[8192,32768]"]
PLAN = {"model": "llama2-13b", "chip": "tpu-v5p", "chips": 4096, "batch_tokens": 3e6, "mfu": 0.4, "tokens": 15e12}
PLAN_CLI = ["plan", "--model", "llama2-13b", "--chip", "tpu-v5p", "--chips", "4096", "--batch-tokens", "3e6",
            "--mfu", "0.4", "--tokens", "15e12", "--json"]


def tpu():
    return str(fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.xplane.pb"))


def tpu_json():
    return str(fixture_path("tpu", "xprof_tpu_inference_2.v6e-4.DERIVED.trace.json.gz"))


def pod():
    """Four hosts of a real Pax run: seconds to read and analyse, whatever the machine."""
    return str(fixture_path("gpu_nvidia", "nsys_jax_pax_fsdp4_a100"))


def gemm():
    return str(fixture_path("gpu_amd", "tracelens_mi300x_jax08_gemm.xplane.pb"))


def gemm_hlo():
    return str(fixture_path("gpu_amd", "hlo", "mi300x_jax08_gemm.jit_dot_79.after_optimizations.DERIVED.hlo.txt"))


EXAMPLE_HLO = str(SRC / "rooflens" / "data" / "transformer_train_step.8dev.after_optimizations.hlo.txt")


def environment() -> dict:
    """What the client passes (merged over the SDK's few inherited variables): this checkout first, the
    tests' own cache, CPU JAX, no XLA_FLAGS (the server's children set their own)."""
    return {"PYTHONPATH": str(SRC), "ROOFLENS_CACHE_DIR": os.environ["ROOFLENS_CACHE_DIR"], "JAX_PLATFORMS": "cpu",
            "HOME": os.environ.get("HOME", "/tmp")}


def cli(cwd, *args):
    """The command line on the same input, in its own process: what the tools are checked against."""
    env = {**{k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}, **environment()}
    return subprocess.run([sys.executable, "-m", "rooflens.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


class Answer:
    def __init__(self, result, progress, elapsed_s):
        self.is_error = result.is_error
        self.text = result.content[0].text if result.content else ""
        self.data = result.structured_content
        self.progress = progress
        self.elapsed_s = elapsed_s


async def converse(cwd: Path, calls: list[tuple[str, str, dict]], workdir: Path | None = None) -> dict:
    params = StdioServerParameters(command=sys.executable, args=["-m", "rooflens", "mcp"], env=environment(),
                                   cwd=str(cwd))
    answers: dict = {"workdir": workdir}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        answers["tools"] = (await session.list_tools()).tools
        for key, tool, args, *client_timeout_s in calls:
            progress: list = []

            async def on_progress(value, total, message, seen=progress):
                seen.append((value, total, message))

            if callable(args):  # made from an earlier answer
                args = args(answers)
            start = time.monotonic()
            try:
                result = await session.call_tool(tool, args, progress_callback=on_progress,
                                                 read_timeout_seconds=client_timeout_s[0] if client_timeout_s else None)
            except MCPError as e:  # the client gave up waiting: it cancels the request
                answers[key] = e
                continue
            answers[key] = Answer(result, progress, time.monotonic() - start)
    return answers


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The server's working directory: a user's project with a model file, a slow script and a budget."""
    d = tmp_path_factory.mktemp("agent project")
    (d / "model.py").write_text(textwrap.dedent("""
        import jax.numpy as jnp

        print("a user's module that prints on import")  # must not reach the protocol's stdout

        def matmul(x, w):
            return x @ w
    """))
    (d / "slow.py").write_text(textwrap.dedent("""
        import os, sys, time
        with open(sys.argv[1], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)
    """))
    (d / "budget.toml").write_text("max_step_time_s = 10.0\nmax_recoverable_share = 1.0\n")
    (d / "loop.hlo.txt").write_text(loop_hlo())
    return d


def loop_hlo() -> str:
    """A real module (JAX's lowering) whose loop carries 200 arrays: a tuple shape of kB, 200 users."""
    import jax
    import jax.numpy as jnp

    def f(xs):
        return jax.lax.fori_loop(0, 10, lambda i, c: [x * 1.0001 + i for x in c], xs)

    args = [jax.ShapeDtypeStruct((8, 128 + k), jnp.float32) for k in range(200)]
    return jax.jit(f).lower(args).as_text(dialect="hlo")


@pytest.fixture(scope="module")
def talk(workdir):
    """One session, the calls in an agent's order."""
    before = sorted(p.relative_to(workdir) for p in workdir.rglob("*"))
    calls = [
        ("chips", "chips", {}),
        ("chip", "chips", {"name": "tpu-v5e"}),
        ("report", "report", {"path": tpu()}),
        ("bad_path", "report", {"path": "no/such/trace.xplane.pb"}),
        ("warm_timeout", "report", {"path": pod(), "timeout_s": 0.3}),
        ("page2", "report", {"path": tpu(), "top": 2, "offset": 2}),
        ("small", "report", {"path": tpu(), "max_bytes": 8000}),
        ("full", "report", {"path": tpu(), "full": True}),
        ("op", "op", {"path": gemm(), "name": "custom-call.1", "program": "jit_dot(79)"}),
        ("op_unknown", "op", {"path": gemm(), "name": "custom-call.7"}),
        ("book", "predict", {"source": "model.py:matmul", "chip": "tpu-v5e", "args": BOOK_ARGS}),
        ("predict_hlo", "predict", {"source": gemm_hlo(), "chip": "mi300x"}),
        ("bad_chip", "predict", {"source": "model.py:matmul", "chip": "tpu-v9", "args": BOOK_ARGS}),
        ("plan", "plan", PLAN),
        ("diff", "diff", {"a": tpu(), "b": tpu_json()}),
        ("check_dict", "check", {"path": tpu(), "budget": {"max_step_time_s": 0.5}}),
        ("check_file", "check", {"path": tpu(), "budget": "budget.toml"}),
        ("check_bad", "check", {"path": tpu(), "budget": {"max_nonsense": 1}}),
        ("hlo", "hlo", {"path": EXAMPLE_HLO, "top": 3}),
        ("hlo_op", "hlo", {"path": EXAMPLE_HLO, "op": "ynn_fusion.3"}),
        ("hlo_loop", "hlo", lambda answers: {"path": "loop.hlo.txt", "op": loop_name(answers["workdir"])}),
        ("run", "run", {"script": str(SCRIPTS / "healthy_loop.py"), "steps": "3:6"}),
        ("run_report", "report", lambda answers: {"path": answers["run"].data["profiles"][-1]
                                                  if answers["run"].data else "the run failed"}),
        ("run_missing", "run", {"script": "no_such_script.py"}),
        ("run_slow", "run", {"script": "slow.py", "args": ["pid.txt"], "logdir": "slow-logs", "timeout_s": 6}),
        ("run_cancelled", "run", {"script": "slow.py", "args": ["pid-cancelled.txt"], "logdir": "slow-logs"}, 6),
        ("after_cancel", "chips", {"name": "tpu-v5e"}),
    ]
    answers = anyio.run(converse, workdir, calls, workdir)
    answers["before"] = before
    return answers


def test_the_tool_list_names_every_verb_with_its_parameters(talk):
    tools = {t.name: t for t in talk["tools"]}
    assert set(tools) == TOOLS
    params = {name: set(t.input_schema["properties"]) for name, t in tools.items()}
    assert {"path", "chip", "hlo", "top"} <= params["report"]
    assert {"path", "name", "program"} <= params["op"]
    assert {"source", "chip", "args", "mesh"} <= params["predict"]
    assert {"a", "b"} <= params["diff"] and {"path", "budget"} <= params["check"] and {"path", "op"} <= params["hlo"]
    assert {"script", "args", "steps", "step_fn", "logdir"} <= params["run"]
    assert tools["op"].input_schema["required"] == ["path", "name"]
    assert all(t.description and "timeout_s" in t.input_schema["properties"] for t in tools.values())


def test_report_ranks_findings_by_recoverable_time_as_the_command_line_reports_them(talk, workdir):
    page = talk["report"]
    assert not page.is_error, page.text
    assert json.loads(page.text) == page.data  # the text part is the same document, for clients without structure
    full = json.loads(cli(workdir, "report", tpu(), "--json").stdout)
    assert page.data["schema_version"] == full["schema_version"] == 2
    assert (page.data["chip"], page.data["chip_reason"], page.data["num_devices"]) == \
           (full["chip"], full["chip_reason"], full["num_devices"]) == ("tpu-v6e", full["chip_reason"], 4)
    ranked = sorted(full["findings"], key=lambda f: -f["recoverable_s"])
    assert page.data["findings"] == ranked[:10] and page.data["findings"]
    assert all("recoverable_s" in f and f["recoverable_s"] <= f["step_s"] for f in page.data["findings"])
    # the costliest ops, measured against their roofline, as the report has them (arithmetic left to op)
    assert [c["name"] for c in page.data["comparison"]] == [c["name"] for c in full["comparison"][:10]]
    for mine, theirs in zip(page.data["comparison"], full["comparison"]):
        assert {k: theirs[k] for k in mine} == mine and "explanation" not in mine
        assert {"measured_s", "predicted_s", "ratio", "bound"} <= set(mine)
    assert page.data["steps"]["breakdown"] == full["steps"]["breakdown"]
    assert page.data["page"]["comparison_total"] == len(full["comparison"])
    assert talk["full"].data == full  # full=true: the whole document


def test_a_report_page_stays_under_its_byte_bound(talk):
    size = len(talk["report"].text.encode())
    assert 2000 < size <= DEFAULT_MAX_BYTES, size
    small = talk["small"]
    assert len(small.text.encode()) <= 8000
    fitted = small.data["page"]["fitted"]
    assert fitted["top_asked"] == 10 and fitted["top_given"] < 10 and fitted["max_bytes"] == 8000
    assert small.data["findings"], "the most recoverable finding is kept"


def test_paging_walks_the_ops(talk):
    first, second = talk["report"].data["comparison"], talk["page2"].data["comparison"]
    assert [c["name"] for c in second] == [c["name"] for c in first[2:4]]
    assert talk["page2"].data["page"]["offset"] == 2 and talk["page2"].data["page"]["top"] == 2


def test_a_bad_path_is_the_command_lines_sentence_and_the_server_stays_up(talk, workdir):
    bad = talk["bad_path"]
    assert bad.is_error
    expected = cli(workdir, "report", "no/such/trace.xplane.pb").stderr.strip()
    assert bad.text == expected == "rooflens: no/such/trace.xplane.pb does not exist."
    assert not talk["page2"].is_error  # the next call, on the same session
    assert talk["bad_chip"].is_error and talk["bad_chip"].text.startswith("rooflens: unknown chip 'tpu-v9'")
    assert "\n" not in talk["bad_chip"].text and "Traceback" not in talk["bad_chip"].text
    assert talk["check_bad"].is_error and "max_nonsense" in talk["check_bad"].text
    missing = talk["run_missing"]
    assert missing.is_error and missing.text == cli(workdir, "run", "no_such_script.py").stderr.strip()


def test_one_op_explained_measurement_arithmetic_hlo_line_and_source(talk, workdir):
    op = talk["op"]
    assert not op.is_error, op.text
    d = op.data
    # the HLO fixture of this program: %custom-call.1 = bf16[16384,1024] x bf16[1024,4096], 2 FLOPs per multiply-add
    flops = 2 * 16384 * 4096 * 1024
    assert d["comparison"]["flops"] == flops and d["explained"]["flops"] == flops
    assert any("2 × 16384·4096 (output) × 1024 (contracted)" in line for line in d["arithmetic"])
    assert d["arithmetic"][-1].startswith("t_pred = max(") and "compute-bound" in d["arithmetic"][-1]
    assert d["hlo_text"].lstrip().startswith("%custom-call.1 = (bf16[16384,4096]")
    assert '__cublas$gemm' in d["hlo_text"] and d["hlo_line"] > 0
    assert d["source"][0] == "/workspace/traces/generate_gemm_trace.py:37 run_gemms"
    full = json.loads(cli(workdir, "report", gemm(), "--json").stdout)
    stat = next(s for s in full["op_stats"] if s["name"] == "custom-call.1" and s["program"] == "jit_dot(79)")
    assert d["measured"] == stat
    row = next(c for c in full["comparison"] if c["name"] == "custom-call.1" and c["program"] == "jit_dot(79)")
    assert d["arithmetic"] == row["explanation"] and d["comparison"]["ratio"] == row["ratio"]
    others = {c["program"] for c in full["comparison"] if c["name"] == "custom-call.1"} - {"jit_dot(79)"}
    assert set(d["other_programs"]) == others
    unknown = talk["op_unknown"]
    assert unknown.is_error and "no op named 'custom-call.7'" in unknown.text and "custom-call.1" in unknown.text


def test_the_books_matmul_on_a_v5e_is_89_3_ms(talk):
    book = talk["book"]
    assert not book.is_error, book.text
    d = book.data
    flops = 2 * 32 * 1024 * 32768 * 8192
    assert d["chip"] == "tpu-v5e" and d["flops"] == flops
    assert d["time_s"] == pytest.approx(flops / 1.97e14, rel=1e-3) == pytest.approx(0.0893, abs=5e-5)
    (op,) = d["ops"]
    assert op["bound"] == "compute" and "= 89.3 ms" in op["explanation"][1]


def test_predict_an_hlo_file_as_the_command_line_does(talk, workdir):
    theirs = json.loads(cli(workdir, "predict", gemm_hlo(), "--chip", "mi300x", "--json").stdout)
    mine = talk["predict_hlo"].data
    assert mine["time_s"] == theirs["time_s"] > 0 and mine["module"] == theirs["module"]
    assert mine["ops"][0] == max(theirs["ops"], key=lambda o: o["total_s"])


def test_plan_diff_check_hlo_chips_answer_as_their_verbs(talk, workdir):
    plan = talk["plan"].data
    assert plan == json.loads(cli(workdir, *PLAN_CLI).stdout)
    assert plan["train"]["step_time_s"] > 0
    diff = talk["diff"].data
    theirs = json.loads(cli(workdir, "diff", tpu(), tpu_json(), "--json").stdout)
    assert diff["steps"] == theirs["steps"] and diff["categories"] == theirs["categories"]
    assert diff["ops"] == theirs["ops"][:10]
    step_s = talk["report"].data["steps"]["breakdown"]["step_time_s"]
    check = talk["check_dict"].data
    assert check["ok"] is False and check["violated"] == ["max_step_time_s"]
    assert check["checks"][0]["measured"] == pytest.approx(step_s) and "max_step_time_s" in check["message"]
    passed = cli(workdir, "check", tpu(), "--budget", "budget.toml", "--json")
    assert passed.returncode == 0 and talk["check_file"].data == json.loads(passed.stdout) | {"message": ""}
    hlo = talk["hlo"].data
    theirs = json.loads(cli(workdir, "hlo", EXAMPLE_HLO, "--json").stdout)
    assert hlo["num_instructions"] == theirs["num_instructions"] == 1521
    assert hlo["collectives"] == theirs["collectives"][:3]
    assert hlo["page"]["collectives_total"] == len(theirs["collectives"])
    op = talk["hlo_op"].data
    theirs = json.loads(cli(workdir, "hlo", EXAMPLE_HLO, "--op", "ynn_fusion.3", "--json").stdout)
    assert op["flops"] == theirs["flops"] and op["what"] == theirs["what"] and op["hlo_text"] == theirs["text"]
    names = {c["name"] for c in talk["chips"].data["chips"]}
    assert {"tpu-v5e", "h100-sxm", "mi300x"} <= names
    assert talk["chip"].data == json.loads(cli(workdir, "chips", "tpu-v5e", "--json").stdout)


def test_a_script_profiled_end_to_end_with_progress(talk):
    run = talk["run"]
    assert not run.is_error, run.text
    d = run.data
    assert d["exit_status"] == 0 and "loss" in d["stdout_tail"]
    cache = Path(os.environ["ROOFLENS_CACHE_DIR"]) / "mcp-runs"
    (profile,) = d["profiles"]
    assert Path(profile).parent.parent.parent.parent == cache  # no logdir named: the user cache
    assert list(Path(profile).glob("*.xplane.pb"))
    values = [p[0] for p in run.progress]
    assert values and values == sorted(values) and len(set(values)) == len(values)
    assert all(total == 900 and message.startswith("run: ") for _, total, message in run.progress)
    rep = talk["run_report"]
    assert not rep.is_error, rep.text
    assert rep.data["steps"]["count"] == 3  # the window asked for: executions 3, 4, 5 of the step
    assert rep.data["chip"] == "local" and rep.data["comparison"]


def ended(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


def test_a_run_past_its_timeout_is_stopped_with_its_processes(talk, workdir):
    slow = talk["run_slow"]
    assert slow.is_error and slow.text.startswith("rooflens: run did not finish in 6 s and was stopped")
    assert slow.elapsed_s < 60
    pid = int((workdir / "pid.txt").read_text())
    assert ended(pid), f"the script (pid {pid}) still runs after its call timed out"


def test_an_analysis_past_its_timeout_is_stopped_and_the_next_call_answers(talk):
    late = talk["warm_timeout"]
    assert late.is_error and late.text == "rooflens: report did not finish in 0.3 s and was stopped; give a " \
                                          "larger timeout_s."
    assert not talk["page2"].is_error and talk["page2"].data["chip"] == "tpu-v6e"


def test_a_cancelled_call_is_stopped_and_the_session_goes_on(talk, workdir):
    assert isinstance(talk["run_cancelled"], MCPError)  # the client stopped waiting after 6 s
    pid = int((workdir / "pid-cancelled.txt").read_text())
    assert ended(pid), f"the script (pid {pid}) still runs after its request was cancelled"
    assert talk["after_cancel"].data == talk["chip"].data


def test_no_tool_writes_outside_what_the_call_names(talk, workdir):
    after = sorted(p.relative_to(workdir) for p in workdir.rglob("*"))
    made = set(after) - set(talk["before"])
    # the runs' named logdir, the script's own files
    assert {p.parts[0] for p in made} <= {"slow-logs", "pid.txt", "pid-cancelled.txt"}
    assert not (workdir / "rooflens-logs").exists()


def test_without_the_sdk_one_sentence_and_exit_2(tmp_path):
    code = "import sys; sys.modules['mcp'] = None; from rooflens.cli import main; main(['mcp'])"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip() == "rooflens: the MCP server needs the MCP SDK (mcp 2.x): pip install 'rooflens[mcp]'."


def loop_name(workdir: Path) -> str:
    return re.search(r"^ *%?([\w.]+) = \(.* while\(", (workdir / "loop.hlo.txt").read_text(), re.M).group(1)


def test_one_op_of_a_loop_over_200_arrays_stays_small(talk, workdir):
    text = (workdir / "loop.hlo.txt").read_text()
    name = loop_name(workdir)
    users = len(re.findall(rf"get-tuple-element\(%?{re.escape(name)}\)", text))
    assert users >= 200
    loop = talk["hlo_loop"]
    assert not loop.is_error, loop.text
    assert loop.data["users_total"] == users and len(loop.data["users"]) == 16
    line = next(x.strip() for x in text.splitlines() if x.strip().lstrip("%").startswith(f"{name} = "))
    line = re.sub(r"/\*index=\d+\*/", "", line)  # XLA's tuple index comments, not part of the instruction
    assert len(line) > 3000 and loop.data["hlo_text"].startswith(line[:2000])
    assert loop.data["hlo_text"].endswith(f"({len(line) - 2000} more characters)")
    full = cli(workdir, "hlo", "loop.hlo.txt", "--op", name, "--json").stdout
    assert len(loop.text.encode()) < 16_000 < len(full.encode())


def test_a_serving_child_keeps_a_report_only_while_its_files_are_unchanged(tmp_path):
    """What lets `op` after `report` skip reading the trace again, and never answer from a stale one."""
    import shutil

    from rooflens.mcp import tools

    trace = tmp_path / "run" / "host.xplane.pb"
    trace.parent.mkdir()
    shutil.copy(tpu(), trace)
    first = tools._report(str(trace.parent))
    assert tools._report(str(trace.parent)) is first  # same files, same arguments: the kept one
    assert tools._report(str(trace.parent), chip="tpu-v5e") is not first  # other arguments: its own
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 1_000_000_000))
    again = tools._report(str(trace.parent))
    assert again is not first and again.to_json()["findings"] == first.to_json()["findings"]
    assert len(tools._KEPT) <= tools.REPORTS_KEPT
    before = tools.identity([str(trace.parent)])
    assert tools.identity([str(trace.parent)]) == before
    (trace.parent / "other.xplane.pb").write_bytes(b"")  # a new file in the directory changes it too
    assert tools.identity([str(trace.parent)]) != before
    assert tools.identity(["gs://bucket/logs"]) is None  # buckets are not kept
