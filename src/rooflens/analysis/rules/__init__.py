"""Findings: small rules over a typed Report, each naming the ops, the evidence, the cause and the fix.

Every rule is declared once in ``RULES``: its id, the finding ids it may produce, a one-line
summary (README.md's findings list says the same) and its function ``fn(report) -> list[Finding]``.
One module per family: device time, communication, the host, memory, several hosts, kernels.
Thresholds are module constants there, so a finding can quote the line it crossed.
``run_rules`` runs them all and orders them by what fixing each would give back per step
(``Finding.recoverable_s``), most first. A rule reads the Report only (the measurements it judges,
such as idle time over the steady state, are computed into it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from rooflens.analysis.findings import Finding, OpRef, Severity
from rooflens.analysis.report import Report
from rooflens.analysis.rules import communication, device_time, host, hosts, kernels, memory


@dataclass(frozen=True)
class Rule:
    id: str
    finding_ids: tuple[str, ...]  # the ``Finding.rule`` values it may produce
    summary: str  # one line: what it finds
    fn: Callable[[Report], list[Finding]]
    #: its findings judge the measured times against the chip's roofline: with a chip given that is not the
    #: trace's own, they are a what-if on that chip, not the trace's own slowness
    roofline: bool = False

    def __call__(self, report) -> list[Finding]:
        found = self.fn(report)
        for f in found:
            if f.rule not in self.finding_ids:  # a programming error, caught by every test that analyses a run
                raise RuntimeError(f"rule {self.id} produced finding {f.rule!r}, which it does not declare")
        return found


#: in the order they run (ties in cost keep this order)
RULES: tuple[Rule, ...] = (
    Rule("memory-peak", ("memory-peak",), "the compiled memory peak far above the state the program holds",
         memory.rule_memory_peak),
    Rule("roofline-trust", ("roofline-trust",), "ops measured faster than their roofline: the cost model or the "
         "chip is wrong", kernels.roofline_trust),
    Rule("slow-op", ("slow-op",), "a dot, convolution or fusion more than 2× off its roofline, with its cause",
         device_time.rule_slow_ops, roofline=True),
    Rule("kernel-inefficiency", ("kernel-inefficiency",), "many ops each moderately off their roofline: the "
         "step's time inside kernels beyond their rooflines", device_time.rule_kernel_inefficiency, roofline=True),
    Rule("slow-collective", ("slow-collective",), "collectives far slower than their bandwidth prediction",
         communication.rule_slow_collectives, roofline=True),
    Rule("communication", ("communication-share", "weights-all-gathered"), "collectives take a large share of "
         "the step, or parameters are gathered every step", communication.rule_communication_share),
    Rule("copies", ("copies",), "copies and transposes take a large share of device time", device_time.rule_copies),
    Rule("tiny-ops", ("tiny-ops",), "many ops (TPU: program executions) per step, the median shorter than a launch",
         device_time.rule_tiny_ops),
    Rule("idle", ("idle",), "device gaps between executions over the steps, located",
         host.rule_idle),
    Rule("async-tail", ("async-tail",), "the trace stopped with dispatched steps still queued on the device: "
         "fewer executions than the host dispatched", host.rule_async_tail),
    Rule("in-window", ("recompilation", "host-transfers"), "compilations and host↔device transfers inside the "
         "window: the transfer time the trace measures, and the implicit transfers the capture recorded",
         host.rule_in_window),
    Rule("host-callback", ("host-callback",), "host callbacks (jax.debug.print, io_callback) inside the step: the "
         "device stops for Python on the host", host.rule_host_callbacks),
    Rule("variance", ("step-variance", "device-straggler"), "uneven step times, or one device busy far longer than "
         "another", device_time.rule_variance),
    Rule("other-programs", ("other-programs",), "other programs (evaluation, metrics, callbacks) take more device "
         "time inside the steps than the step program", device_time.rule_other_programs),
    Rule("overheads", ("overheads",), "device time outside kernels within the step (launch and dispatch latency, "
         "host round-trips), measured from the gaps between ops", device_time.rule_overheads),
    Rule("hosts", ("straggler", "host-outlier"), "several hosts: the host the others wait for, and ops slow "
         "on one host only", hosts.rule_hosts),
)

#: every finding id a report can carry
FINDING_IDS: tuple[str, ...] = tuple(i for r in RULES for i in r.finding_ids)


def run_rules(report: Report) -> list[Finding]:
    """Every rule's findings, the one whose fix gives back the most time per step first (ties: the more
    severe, then the more device time involved). With a chip given that is not the trace's own
    (``report.chip_mismatch``), the roofline rules' findings are what-ifs on that chip: low, said so in
    their title and evidence, and after the findings about the trace itself."""
    found = [what_if(report, f) if rule.roofline and report.chip_mismatch else f
             for rule in RULES for f in rule(report)]
    rank: dict[Severity, int] = {"high": 0, "medium": 1, "low": 2}
    return sorted(found, key=lambda f: (f.what_if, -f.recoverable_s, rank.get(f.severity, 3), -f.time_s))


def what_if(report: Report, f: Finding) -> Finding:
    """A roofline finding on a chip the trace did not run on, said to be a what-if (and low: the trace's
    own chip may well run the op at its roofline)."""
    return replace(f, severity="low", title=f"What-if on {report.chip}: {f.title}", what_if=True,
                   evidence=(f"what-if: the times were measured on another chip than {report.chip} (the report's "
                             "header says which); on its own chip the op may well run at its roofline", *f.evidence))


__all__ = ["FINDING_IDS", "RULES", "Finding", "OpRef", "Rule", "Severity", "run_rules"]
