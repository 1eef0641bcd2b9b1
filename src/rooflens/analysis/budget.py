"""Performance budgets: limits a run must meet, checked against its Report (for CI).

A budget file (TOML)::

    max_recompiles = 0          # compilations of already-compiled functions in the measured window
    max_idle_fraction = 0.3     # the device (a CPU's devices: the CPU) idle, of the measured time
    min_mfu = 0.2               # model FLOPs / (step time × peak)
    max_step_time_s = 0.05
    [max_ratio]                 # measured / roofline, time-weighted over the ops of a category or opcode
    matmul = 2.0
    [max_share]                 # share of the step
    collective = 0.25
    all-gather = 0.05
    max_recoverable_share = 0.1 # no finding's fix may give back more than this share of the step
    [max_recoverable_s]         # time per step a fix would give back, summed over the findings of an id
    overheads = 0.002
    slow-op = 0.005
    [program."jit_train_step"]  # the same keys for one program
    max_step_time_s = 0.04

``parse_budget`` turns the text into a :class:`Budget` (a :class:`BudgetError`, one sentence, for
an unknown key or a wrong type); ``evaluate`` measures each limit on a Report. Both are pure.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field

from rooflens.analysis.diff import op_kind, program_key
from rooflens.analysis.findings import Finding
from rooflens.analysis.report import MEASURED_STATISTIC, OpComparison, Report, StepBreakdown
from rooflens.errors import RooflensError
from rooflens.hlo.opcodes import CATEGORIES
from rooflens.units import plural

SCALARS = {"max_recompiles": int, "max_idle_fraction": float, "min_mfu": float, "max_step_time_s": float,
           "max_recoverable_share": float}
TABLES = ("max_ratio", "max_share", "max_recoverable_s")


class BudgetError(RooflensError):
    """A budget file that cannot be used (not TOML, an unknown key, a wrong type)."""


@dataclass(frozen=True)
class Limits:
    max_recompiles: int | None = None
    max_idle_fraction: float | None = None
    min_mfu: float | None = None
    max_step_time_s: float | None = None
    max_recoverable_share: float | None = None  # the largest finding's recoverable_s / its step
    max_ratio: dict[str, float] = field(default_factory=dict)  # category or opcode → limit
    max_share: dict[str, float] = field(default_factory=dict)
    max_recoverable_s: dict[str, float] = field(default_factory=dict)  # finding id → s per step


@dataclass(frozen=True)
class Budget:
    limits: Limits
    programs: dict[str, Limits] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True)
class BudgetCheck:
    """One limit, measured."""

    budget: str  # as the file names it: "min_mfu", "max_share.all-gather", 'program."jit_step".max_step_time_s'
    limit: float
    measured: float | None  # None: the report cannot measure it (no roofline, no such op or program)
    ok: bool
    detail: str = ""

    def line(self) -> str:
        verdict = "ok" if self.ok else "VIOLATED"
        measured = "not measured" if self.measured is None else _fmt(self.measured)
        op = ">=" if self.budget.rsplit(".", 1)[-1].startswith("min_") else "<="
        return f"{verdict:8} {self.budget}: {measured} (budget {op} {_fmt(self.limit)})" + (
            f" — {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class CheckResult:
    checks: tuple[BudgetCheck, ...]
    source: str = ""

    @property
    def violated(self) -> tuple[BudgetCheck, ...]:
        return tuple(c for c in self.checks if not c.ok)

    @property
    def ok(self) -> bool:
        return not self.violated

    def message(self) -> str:
        """The sentence a failed check raises and prints, naming every violated budget."""
        if self.ok:
            return f"every budget met ({len(self.checks)} checked)"
        return (f"{plural(len(self.violated), 'budget')} violated: "
                + "; ".join(f"{c.budget} = {'not measured' if c.measured is None else _fmt(c.measured)} "
                            f"({'>=' if c.budget.rsplit('.', 1)[-1].startswith('min_') else '<='} "
                            f"{_fmt(c.limit)}){' — ' + c.detail if c.detail else ''}"
                            for c in self.violated))

    def to_json(self) -> dict:
        return {"ok": self.ok, "source": self.source, "measured_statistic": MEASURED_STATISTIC,
                "checks": [{"budget": c.budget, "limit": c.limit, "measured": c.measured, "ok": c.ok,
                            "detail": c.detail} for c in self.checks],
                "violated": [c.budget for c in self.violated]}


def _fmt(v: float) -> str:
    return f"{v:.4g}"


# -- parsing --------------------------------------------------------------------------------------

def _number(value, want: type, where: str, source: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BudgetError(f"{source}: {where} must be a number, not {type(value).__name__} {value!r}.")
    if want is int and (not float(value).is_integer()):
        raise BudgetError(f"{source}: {where} must be a whole number, not {value!r}.")
    if not math.isfinite(value) or value < 0:
        raise BudgetError(f"{source}: {where} must be a finite number ≥ 0, not {value!r}.")
    return want(value)


def _limits(table: dict, where: str, source: str, allow_programs: bool) -> Limits:
    scalars, tables = {}, {}
    for key, value in table.items():
        name = f"{where}{key}"
        if key in SCALARS:
            scalars[key] = _number(value, SCALARS[key], name, source)
        elif key in TABLES:
            if not isinstance(value, dict):
                what, eg = (("finding id", "overheads = 0.002") if key == "max_recoverable_s" else
                            ("category or opcode", "collective = 0.25"))
                raise BudgetError(f"{source}: {name} must be a table of {what} = limit "
                                  f"(e.g. [{key}] {eg}), not {type(value).__name__}.")
            if key == "max_recoverable_s":
                from rooflens.analysis.rules import FINDING_IDS

                unknown = [k for k in value if k not in FINDING_IDS]
                if unknown:
                    raise BudgetError(f"{source}: {name}.{unknown[0]} names no finding (finding ids: "
                                      f"{', '.join(FINDING_IDS)}).")
            tables[key] = {str(k): float(_number(v, float, f"{name}.{k}", source)) for k, v in value.items()}
        elif key == "program" and allow_programs:
            continue
        else:
            known = ", ".join([*SCALARS, *(f"[{t}]" for t in TABLES), *(['[program."NAME"]'] if allow_programs
                                                                         else [])])
            raise BudgetError(f"{source}: unknown budget key {name!r} (known: {known}).")
    return Limits(**scalars, **tables)


def parse_budget(text: str, source: str = "budget") -> Budget:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BudgetError(f"{source} is not valid TOML ({e}).") from None
    return budget_from_mapping(data, source)


def budget_from_mapping(data: dict, source: str = "the budget") -> Budget:
    """A Budget from the TOML's tables (or a dict with the same keys)."""
    programs = data.get("program", {})
    if not isinstance(programs, dict) or not all(isinstance(v, dict) for v in programs.values()):
        raise BudgetError(f'{source}: program must hold tables, e.g. [program."jit_step"] max_step_time_s = 0.05.')
    limits = _limits(data, "", source, allow_programs=True)
    per = {name: _limits(t, f'program."{name}".', source, allow_programs=False) for name, t in programs.items()}
    if limits == Limits() and not per:
        raise BudgetError(f"{source} sets no budget (keys: {', '.join(SCALARS)}, "
                          f"{', '.join(f'[{t}]' for t in TABLES)}, " '[program."NAME"]).')
    return Budget(limits, per, source)


# -- measuring ------------------------------------------------------------------------------------

def _selects(key: str, c: OpComparison) -> bool:
    """A budget key names a category (``matmul``, ``collective``) or an opcode (``all-gather``)."""
    return c.category == key if key in CATEGORIES else op_kind(c.opcode, c.name) == key


def _program_matches(name: str, program: str) -> bool:
    return program == name or program_key(program) == program_key(name)


def idle_fraction(report: Report) -> float | None:
    """The largest idle share of the measured time over the units the idle rule judges (each device,
    or a CPU's forced devices together), warm-up and compilation left out as the rule leaves them."""
    fractions = [u.idle_s / u.unit.window_s for u in report.steady.idle if u.unit.window_s > 0]
    return max(fractions, default=None)


def _measure(report: Report, limits: Limits, prefix: str, step: StepBreakdown | None,
             ops: list[OpComparison], recompiles: int, idle: float | None,
             findings: list[Finding]) -> list[BudgetCheck]:
    out = []
    per_step = (max(step.steps, 1) if step else 1) * max(report.num_devices, 1)
    step_time = step.step_time_s if step else 0.0
    if limits.max_recompiles is not None:
        out.append(BudgetCheck(f"{prefix}max_recompiles", limits.max_recompiles, recompiles,
                               recompiles <= limits.max_recompiles,
                               "; ".join(dict.fromkeys(c.reason for c in report.in_window.compilations
                                                       if c.reason))[:200]))
    if limits.max_idle_fraction is not None:
        out.append(BudgetCheck(f"{prefix}max_idle_fraction", limits.max_idle_fraction, idle,
                               idle is not None and idle <= limits.max_idle_fraction))
    if limits.min_mfu is not None:
        mfu = step.mfu if step else None
        out.append(BudgetCheck(f"{prefix}min_mfu", limits.min_mfu, mfu, mfu is not None and mfu >= limits.min_mfu,
                               "" if mfu is not None else "no roofline or no step to measure MFU on"))
    if limits.max_step_time_s is not None:
        t = step.step_time_s if step else None
        out.append(BudgetCheck(f"{prefix}max_step_time_s", limits.max_step_time_s, t,
                               t is not None and t <= limits.max_step_time_s))
    for key, limit in limits.max_ratio.items():
        sel = [c for c in ops if _selects(key, c) and c.priced]
        predicted = sum(c.predicted_s * c.runs for c in sel)
        ratio = sum(c.total_time_s for c in sel) / predicted if predicted else None
        worst = max(sel, key=lambda c: c.ratio or 0.0, default=None)
        out.append(BudgetCheck(f"{prefix}max_ratio.{key}", limit, ratio, ratio is None or ratio <= limit,
                               (f"worst {worst.name} at {worst.ratio:.2f}×" if worst and worst.ratio else "")
                               if ratio is not None else f"no priced {key} op (nothing to exceed)"))
    for key, limit in limits.max_share.items():
        sel = [c for c in ops if _selects(key, c)]
        time = sum(c.total_time_s for c in sel) / per_step
        share = time / step_time if step_time else None
        top = ", ".join(c.name for c in sorted(sel, key=lambda c: -c.total_time_s)[:3])
        out.append(BudgetCheck(f"{prefix}max_share.{key}", limit, share, share is not None and share <= limit,
                               f"{len(sel)} op(s): {top}" if sel else ""))
    if limits.max_recoverable_share is not None:
        shares = [(f.recoverable_s / f.step_s, f) for f in findings if f.step_s > 0]
        worst = max(shares, key=lambda sf: sf[0], default=None)
        limit = limits.max_recoverable_share
        out.append(BudgetCheck(f"{prefix}max_recoverable_share", limit, worst[0] if worst else 0.0,
                               worst is None or worst[0] <= limit,
                               f"{worst[1].rule}: {worst[1].title}" if worst else "no finding gives back time"))
    for key, limit in limits.max_recoverable_s.items():
        sel = [f for f in findings if f.rule == key]
        total = sum(f.recoverable_s for f in sel)
        out.append(BudgetCheck(f"{prefix}max_recoverable_s.{key}", limit, total, total <= limit,
                               "; ".join(f.title for f in sel[:3]) if sel else f"no {key} finding"))
    return out


def evaluate(report: Report, budget: Budget) -> CheckResult:
    """Every limit of ``budget`` measured on ``report``."""
    checks = _measure(report, budget.limits, "", report.steps, report.comparison,
                      len(report.in_window.compilations), idle_fraction(report), report.findings)
    for name, limits in budget.programs.items():
        prefix = f'program."{name}".'
        step = next((p for p in report.programs if _program_matches(name, p.program)), None)
        if step is None:
            for key in [k for k in SCALARS if getattr(limits, k) is not None] + \
                       [f"{t}.{k}" for t in TABLES for k in getattr(limits, t)]:
                t, _, k = key.partition(".")
                limit = getattr(limits, t)[k] if k else getattr(limits, t)
                checks.append(BudgetCheck(prefix + key, float(limit), None, False,
                                          f"no program {name!r} in the report (it has: "
                                          f"{', '.join(p.program for p in report.programs[:6])})"))
            continue
        ops = [c for c in report.comparison if c.program == step.program]
        recompiles = sum(1 for c in report.in_window.compilations if _program_matches(name, c.module))
        idle = step.idle_s / step.step_time_s if step.step_time_s else None
        findings = [f for f in report.findings if f.program == step.program]
        checks += _measure(report, limits, prefix, step, ops, recompiles, idle, findings)
    return CheckResult(tuple(checks), budget.source)
