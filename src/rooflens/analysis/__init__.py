"""Expected vs observed, and findings that explain the difference.

>>> rep = rl.analyze(rl.load("logs"))          # chip inferred from the trace (CPU: 'local')
>>> rep.comparison[0].ratio, rep.findings[0].title
"""

from rooflens.analysis.compare import OpComparison, Report, StepBreakdown, analyze, infer_chip
from rooflens.analysis.rules import RULES, Finding, run_rules

__all__ = ["RULES", "Finding", "OpComparison", "Report", "StepBreakdown", "analyze", "infer_chip", "run_rules"]
