"""The rule registry: every finding id declared once, listed in the README with what it finds, and
every finding a real analysis produces carries an id its rule declares."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import rooflens as rl
from rooflens.analysis import rules
from rooflens.analysis.rules import FINDING_IDS, RULES, Rule, run_rules
from rooflens.analysis.rules.device_time import rule_slow_ops
from tests.conftest import fixture_path

README = Path(__file__).resolve().parent.parent / "README.md"
STOP = {"their", "which", "where", "after", "beyond", "large", "share", "other", "another", "every", "shorter"}


def _readme_findings() -> dict[str, str]:
    """README's findings list: each bolded finding id → the text of its bullet."""
    text = README.read_text()
    body = text.split("Each finding is a\nsmall rule", 1)[1].split("\n\n", 2)[1]
    bullets = re.split(r"\n(?=- \*\*)", body.strip())
    return {fid: " ".join(b.split()) for b in bullets for fid in re.findall(r"\*\*([a-z-]+)\*\*", b)}


def _words(s: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]{5,}", s.lower()) if w not in STOP}


def test_ids_are_declared_once():
    assert len({r.id for r in RULES}) == len(RULES)
    assert len(set(FINDING_IDS)) == len(FINDING_IDS)  # "straggler" no longer means two things
    assert {"straggler", "device-straggler"} <= set(FINDING_IDS)
    assert all(r.summary and "\n" not in r.summary for r in RULES)


def test_the_readme_lists_every_finding_with_its_rules_gist():
    listed = _readme_findings()
    assert set(listed) == set(FINDING_IDS), set(listed) ^ set(FINDING_IDS)
    def stems(s: str) -> set[str]:
        return {w.rstrip("s") for w in _words(s)}

    for r in RULES:
        for fid in r.finding_ids:
            shared = _words(r.summary) & _words(listed[fid])
            assert shared, f"README's line for {fid} shares nothing with the rule's summary {r.summary!r}"
        # the rule's gist is in the README: at least half of its summary's words are in its findings' lines
        said = stems(r.summary)
        told = set().union(*(stems(listed[fid]) for fid in r.finding_ids))
        assert len(said & told) >= len(said) / 2, (r.id, sorted(said - told), r.summary)


@pytest.fixture(scope="module")
def gemm_report():
    return rl.analyze(rl.load(str(fixture_path("gpu_amd", "tracelens_mi300x_jax08_gemm.xplane.pb"))))


def test_a_real_reports_findings_carry_registered_ids(gemm_report):
    found = run_rules(gemm_report)
    assert found and {f.rule for f in found} <= set(FINDING_IDS)
    assert "slow-op" in {f.rule for f in found}


def test_a_rule_that_emits_an_undeclared_id_is_caught(gemm_report):
    wrong = Rule("mislabelled", ("copies",), "slow ops declared as copies", rule_slow_ops)
    with pytest.raises(RuntimeError, match="slow-op"):
        wrong(gemm_report)
    assert rules.RULES[2].fn is rule_slow_ops and rules.RULES[2](gemm_report)
