"""rl.check / `rooflens check`: budgets a healthy run meets and pathological runs violate, by name."""

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

import rooflens as rl
from rooflens import cli
from rooflens.analysis.budget import BudgetError, evaluate, parse_budget
from tests.dp_runs import report, runs

BUDGET = """
max_recompiles = 0
max_idle_fraction = 0.5
[max_share]
all-gather = 0.05
[program."jit_step"]
max_step_time_s = 5.0
"""


@pytest.fixture()
def budget_file(tmp_path):
    p = tmp_path / "rooflens.toml"
    p.write_text(BUDGET)
    return p


def test_a_healthy_run_meets_the_budget(budget_file):
    result = rl.check(report("dp4096"), budget_file)
    assert result.ok and len(result.checks) == 4
    by = {c.budget: c for c in result.checks}
    assert by["max_recompiles"].measured == 0 and by["max_share.all-gather"].measured == 0
    assert 0 <= by["max_idle_fraction"].measured < 0.5
    assert 0 < by['program."jit_step".max_step_time_s'].measured < 5


def test_shape_churn_violates_max_recompiles(budget_file):
    with pytest.raises(AssertionError, match=r"max_recompiles = \d+ \(<= 0\)") as e:
        rl.check(report("churn"), budget_file)
    assert "max_share.all-gather" not in str(e.value)  # only what was violated is named


def test_fsdp_violates_the_all_gather_share(budget_file):
    result = evaluate(report("fsdp"), parse_budget(BUDGET))
    assert [c.budget for c in result.violated] == ["max_share.all-gather"]
    (c,) = result.violated
    assert c.measured > 0.05 and "all-gather" in c.detail
    with pytest.raises(AssertionError) as e:
        rl.check(report("fsdp"), budget_file)
    assert str(e.value) == result.message()


def test_check_command_prints_every_budget_and_exits_1_naming_the_violated(budget_file):
    logs = runs()
    ok = CliRunner().invoke(cli.cli, ["check", str(logs["dp4096"]), "--budget", str(budget_file)])
    assert ok.exit_code == 0, ok.output
    assert ok.stdout.count("ok ") == 4 and "every budget met" in ok.stdout
    r = subprocess.run([sys.executable, "-m", "rooflens.cli", "check", str(logs["fsdp"]), "--budget",
                        str(budget_file), "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["violated"] == ["max_share.all-gather"] and len(doc["checks"]) == 4
    assert "max_share.all-gather" in r.stderr and "Traceback" not in r.stderr


def test_min_mfu_and_max_ratio_are_measured():
    result = evaluate(report("dp4096"), parse_budget("min_mfu = 0.99\n[max_ratio]\nmatmul = 1000\n"))
    by = {c.budget: c for c in result.checks}
    assert 0 < by["min_mfu"].measured < 0.99 and not by["min_mfu"].ok
    assert by["max_ratio.matmul"].ok and by["max_ratio.matmul"].measured > 0
    assert [c.budget for c in result.violated] == ["min_mfu"]


@pytest.mark.parametrize("text, says", [
    ("max_recompile = 0\n", "unknown budget key 'max_recompile'"),
    ('min_mfu = "high"\n', "min_mfu must be a number"),
    ("max_recompiles = 1.5\n", "max_recompiles must be a whole number"),
    ("[max_share]\ncollective = -1\n", "max_share.collective must be a finite number"),
    ("max_share = 0.3\n", "max_share must be a table"),
    ('[program."jit_step"]\nmax_stp = 1\n', "unknown budget key 'program.\"jit_step\".max_stp'"),
    ("min_mfu = \n", "is not valid TOML"),
    ("# nothing\n", "sets no budget"),
])
def test_a_bad_budget_file_is_one_sentence_and_exit_2(tmp_path, text, says):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(BudgetError, match=None) as e:
        parse_budget(text, str(p))
    assert says in str(e.value) and "\n" not in str(e.value).strip()
    res = CliRunner().invoke(cli.cli, ["check", str(runs()["dp64"]), "--budget", str(p)])
    assert isinstance(res.exception, BudgetError)  # main() turns it into one line on stderr, exit 2


def test_bad_budget_through_main_exits_2(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("max_recompile = 0\n")
    r = subprocess.run([sys.executable, "-m", "rooflens.cli", "check", str(tmp_path / "nowhere"), "--budget", str(p)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "unknown budget key" in r.stderr
    r = subprocess.run([sys.executable, "-m", "rooflens.cli", "check", str(tmp_path), "--budget",
                        str(tmp_path / "missing.toml")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr


def test_json_and_out_are_the_same_document(tmp_path):
    out = tmp_path / "r.json"
    res = CliRunner().invoke(cli.cli, ["report", str(runs()["dp64"]), "--json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    printed, written = json.loads(res.stdout), json.loads(out.read_text())
    assert printed == written
    assert {"hosts", "metadata", "path", "sources", "op_stats", "comparison", "findings", "steps", "memory"} <= set(
        printed)
    assert printed["hosts"] and printed["metadata"]["function"] == "step"
