"""Expected vs observed, findings that explain the difference, diffs between runs and budgets.

>>> rep = rl.analyze(rl.load("logs"))          # chip inferred from the trace (CPU: 'local')
>>> rep.comparison[0].ratio, rep.findings[0].title
>>> rl.diff(rep_small, rep_large).categories    # what changed between two runs
>>> rl.check(rep, "rooflens.toml")              # AssertionError naming every violated budget
"""

from rooflens.analysis.compare import analyze, infer_chip
from rooflens.analysis.findings import Finding, OpRef, Severity
from rooflens.analysis.report import (
    Bound,
    Category,
    Compilation,
    InWindow,
    OpComparison,
    Report,
    Roofs,
    StepBreakdown,
    Timeline,
    TimelineOp,
)
from rooflens.analysis.rules import FINDING_IDS, RULES, Rule, run_rules

__all__ = ["FINDING_IDS", "RULES", "Bound", "Category", "Compilation", "Finding", "InWindow", "OpComparison", "OpRef",
           "Report", "Roofs", "Rule", "Severity", "StepBreakdown", "Timeline", "TimelineOp", "analyze", "infer_chip",
           "run_rules"]
