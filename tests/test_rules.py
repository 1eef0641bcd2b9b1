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


def test_a_units_gaps_are_kept_as_columns_and_read_as_the_rules_read_them():
    """A trace of no programs leaves a gap per kernel (the PyTorch H100 export), kept as two
    columns (224 on one GPU here): the longest gaps come longest first (of equal ones, the earlier first) and a start is found to the
    microsecond, as a sort and a set of the gaps one by one give them."""
    from rooflens.trace.idle import IdleGap

    rep = rl.analyze(rl.load(str(fixture_path("gpu_nvidia", "nsys_sqlite", "nsysai_pytorch_h100x2_1s.sqlite"))),
                     chip="h100-sxm")
    units = [u for u in rep.steady.idle if u.gaps is not None]
    assert units and max(len(u.gaps) for u in units) > 200
    for u in units:
        one_by_one = [IdleGap(s, d) for s, d in zip(u.gaps.start_s.tolist(), u.gaps.duration_s.tolist())]
        longest = sorted(one_by_one, key=lambda g: -g.duration_s)
        for n, at_least in ((3, 0.0), (3, 1e-4), (50, 0.0), (10**6, 1e-5)):
            assert u.gaps.largest(n, at_least) == [g for g in longest if g.duration_s >= at_least][:n]
        starts = {round(g.start_s, 6) for g in one_by_one}
        for g in one_by_one[::97] + [IdleGap(s + d, 0.0) for s, d in zip(u.gaps.start_s[:50].tolist(),
                                                                          u.gaps.duration_s[:50].tolist())]:
            for probe in (g.start_s, g.start_s + 4e-7, g.start_s - 6e-7, g.start_s + 2e-6):
                assert u.gaps.starts_at(probe) == (round(probe, 6) in starts), probe
