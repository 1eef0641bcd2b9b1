"""A finding: what a rule found, the ops it names, the evidence, the cause, the fix, and what the
fix is worth.

Its own module so that the Report (which holds findings) and the rules (which make them) both
depend on it and not on each other.

``recoverable_s`` is the time one device would get back per step if the finding were fixed
(per execution of its program when the trace has no steps), predicted from the roofline and the
measurement: a slow op's excess over its roofline times its runs per step, idle time, a
recompilation's time per step. It is never more than the step (``step_s``), and the findings of
a report are sorted by it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal, NamedTuple

Severity = Literal["high", "medium", "low"]


class OpRef(NamedTuple):
    """One op of one program: an instruction name is unique only inside its program."""

    program: str
    name: str

    def __str__(self) -> str:
        return f"{self.program}/{self.name}" if self.program else self.name


@dataclass(frozen=True)
class Finding:
    rule: str  # the finding's id (rooflens.analysis.rules.FINDING_IDS), e.g. "slow-op"
    severity: Severity
    title: str
    ops: tuple[OpRef, ...]
    time_s: float  # device time involved, per device per step where steps are known, else in total
    evidence: tuple[str, ...]
    cause: str
    fix: str
    recoverable_s: float = 0.0  # per device per step (per execution of `per`'s program) a fix gives back
    step_s: float = 0.0  # the step (or execution) recoverable_s is part of; 0 when none was measured
    per: str = "step"  # what recoverable_s is per: "step", or "execution of jit_f" (a trace without steps)
    program: str = ""  # the program whose step (execution) it is judged in
    headroom_bytes: float | None = None  # memory findings: device memory a fix would free (None: not a memory one)
    what_if: bool = False  # judged against the roofline of a chip given that is not the trace's own (--chip)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ops"] = [{"program": o.program, "name": o.name} for o in self.ops]
        d["evidence"] = list(self.evidence)
        return d
