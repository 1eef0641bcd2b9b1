"""A finding: what a rule found, the ops it names, the evidence, the cause and the fix.

Its own module so that the Report (which holds findings) and the rules (which make them) both
depend on it and not on each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Severity = Literal["high", "medium", "low"]


@dataclass(frozen=True)
class Finding:
    rule: str  # the finding's id (rooflens.analysis.rules.FINDING_IDS), e.g. "slow-op"
    severity: Severity
    title: str
    ops: tuple[str, ...]
    time_s: float  # device time involved, per device per step where steps are known, else in total
    evidence: tuple[str, ...]
    cause: str
    fix: str

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ops"], d["evidence"] = list(self.ops), list(self.evidence)
        return d
