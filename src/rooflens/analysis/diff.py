"""Two runs side by side: step time, MFU, time and share of the step per category and per op.

``diff(a, b)`` takes two :class:`Report` (two batch sizes, two chips, two commits) or a
:class:`rooflens.cost.Prediction` and a Report. Ops are matched across them in two passes:

1. the same program (its name without JAX's ``(N)`` suffix) and the same instruction name and
   opcode: XLA names instructions deterministically, so an unchanged program matches op for op;
2. what is left, by named scope + opcode + shape pattern (dtype and rank; the dims may differ, as a
   batch dimension does), pairing the costliest with the costliest.

An op left over whose kind (opcode) the other side does not run at all *appeared* (a new
all-gather, a new copy) or *disappeared*; one whose kind the other side runs but that could not be
paired is *unmatched*. Times are per device per step (totals over the steps); a share is of the step time.
An op's roofline ratio is the report's one statistic, ``MEASURED_STATISTIC`` (its median per execution over its
roofline), named so in the JSON and the column header.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Literal

from rooflens.analysis.report import MEASURED_STATISTIC, Report

MatchedBy = Literal["name", "scope+opcode+shape"]
_SUFFIX = re.compile(r"\(\d+\)$")
_SHAPE = re.compile(r"([a-z]+[0-9a-z]*)\[([^\]]*)\]")


def program_key(program: str) -> str:
    """``jit_step(3)`` → ``jit_step``: the same function compiled for other shapes keeps its name."""
    return _SUFFIX.sub("", program)


def op_kind(opcode: str, name: str = "") -> str:
    """An opcode without its async half (``all-gather-start`` → ``all-gather``); the name's base when
    the opcode is unknown."""
    kind = opcode or name.split(".")[0]
    for suffix in ("-start", "-done", "-update"):
        if kind.endswith(suffix):
            return kind[: -len(suffix)]
    return kind


def shape_pattern(shape: str) -> str:
    """``f32[512,1024]{1,0}`` → ``f32[_,_]``: dtype and rank (tuples: each leaf)."""
    return ",".join(f"{dt}[{','.join('_' for d in dims.split(',') if d.strip())}]"
                    for dt, dims in _SHAPE.findall(shape)) or shape


@dataclass(frozen=True)
class OpRow:
    """One op of one side, per device per step."""

    name: str
    program: str
    category: str
    opcode: str
    named_scope: str
    shape: str
    time_s: float  # per device per step
    share: float  # of the step time
    ratio: float | None = None  # measured / roofline (None: unpriced, or a prediction)

    @property
    def kind(self) -> str:
        return op_kind(self.opcode, self.name)


@dataclass(frozen=True)
class Side:
    """What one run (or one prediction) contributes to a diff."""

    label: str
    chip: str
    step_time_s: float
    mfu: float | None
    program: str
    steps: int
    predicted_s: float | None
    ops: tuple[OpRow, ...]


@dataclass(frozen=True)
class StepDiff:
    program_a: str
    program_b: str
    steps_a: int
    steps_b: int
    step_time_a_s: float
    step_time_b_s: float
    mfu_a: float | None
    mfu_b: float | None
    predicted_a_s: float | None
    predicted_b_s: float | None

    @property
    def delta_s(self) -> float:
        return self.step_time_b_s - self.step_time_a_s

    @property
    def ratio(self) -> float | None:
        return self.step_time_b_s / self.step_time_a_s if self.step_time_a_s else None


@dataclass(frozen=True)
class CategoryDiff:
    category: str
    time_a_s: float  # per device per step
    time_b_s: float
    share_a: float  # of A's step
    share_b: float

    @property
    def delta_s(self) -> float:
        return self.time_b_s - self.time_a_s

    @property
    def delta_share(self) -> float:
        return self.share_b - self.share_a


@dataclass(frozen=True)
class OpDiff:
    name_a: str
    name_b: str
    program_a: str
    program_b: str
    category: str
    opcode: str
    named_scope: str
    shape_a: str
    shape_b: str
    matched_by: MatchedBy
    time_a_s: float
    time_b_s: float
    share_a: float
    share_b: float
    ratio_a: float | None
    ratio_b: float | None

    @property
    def delta_s(self) -> float:
        return self.time_b_s - self.time_a_s


@dataclass
class Diff:
    label_a: str
    label_b: str
    chip_a: str
    chip_b: str
    steps: StepDiff
    categories: list[CategoryDiff]
    ops: list[OpDiff]  # matched, most time (on either side) first
    appeared: list[OpRow]  # in B only, a kind A does not run
    disappeared: list[OpRow]  # in A only, a kind B does not run
    unmatched: list[tuple[Literal["a", "b"], OpRow]]  # left over on one side, of a kind the other runs
    notes: list[str] = field(default_factory=list)

    def category(self, name: str) -> CategoryDiff | None:
        return next((c for c in self.categories if c.category == name), None)

    def to_json(self) -> dict:
        def row(r: OpRow) -> dict:
            return {**asdict(r), "kind": r.kind}

        return {
            "measured_statistic": MEASURED_STATISTIC,
            "a": self.label_a, "b": self.label_b, "chip_a": self.chip_a, "chip_b": self.chip_b,
            "steps": {**asdict(self.steps), "delta_s": self.steps.delta_s, "ratio": self.steps.ratio},
            "categories": [{**asdict(c), "delta_s": c.delta_s, "delta_share": c.delta_share} for c in self.categories],
            "ops": [{**asdict(o), "delta_s": o.delta_s} for o in self.ops],
            "appeared": [row(r) for r in self.appeared], "disappeared": [row(r) for r in self.disappeared],
            "unmatched": [{"side": s, **row(r)} for s, r in self.unmatched], "notes": list(self.notes),
        }


# -- sides ----------------------------------------------------------------------------------------

def per_step_divisor(report: Report) -> float:
    """Executions of a once-per-step op: steps × devices (the step breakdown's own normalisation)."""
    steps = report.steps.steps if report.steps and report.steps.steps else 1
    return max(steps, 1) * max(report.num_devices, 1)


def side_of_report(report: Report, label: str = "") -> Side:
    st = report.steps
    step_time = st.step_time_s if st else 0.0
    div = per_step_divisor(report)
    ops = tuple(OpRow(c.name, c.program, c.category, c.opcode, c.named_scope, c.shape, c.total_time_s / div,
                      (c.total_time_s / div / step_time) if step_time else 0.0, c.ratio)
                for c in report.comparison)
    return Side(label or ", ".join(report.sources) or report.path, report.chip, step_time, st.mfu if st else None,
                st.program if st else "", st.steps if st else 0,
                st.predicted_s if st and report.roofs is not None else None, ops)


def side_of_prediction(pred, label: str = "") -> Side:
    """A prediction as one side: its roofline times stand in for measured ones (per device, one run)."""
    total = pred.time_s
    ops = tuple(OpRow(o.name, pred.module, o.category, o.opcode, o.named_scope, "", o.total_s,
                      o.total_s / total if total else 0.0, None) for o in pred.ops)
    return Side(label or f"prediction on {pred.chip}", pred.chip, total, None, pred.module, 1, total, ops)


def side_of_json(doc: dict, label: str = "") -> Side:
    """A saved report (``rooflens report --out r.json``, schema version 1) as one side: the same
    figures ``side_of_report`` takes from the Report, read from its documented fields."""
    from rooflens.analysis.report import SCHEMA_VERSION

    # version 1 differs from 2 in the findings' ops alone, which a side does not read
    if not isinstance(doc, dict) or doc.get("schema_version") not in (1, SCHEMA_VERSION):
        raise ValueError(f"not a rooflens report of schema version 1 or {SCHEMA_VERSION}")
    try:
        br = (doc.get("steps") or {}).get("breakdown") or {}
        step_time = float(br.get("step_time_s") or 0.0)
        steps = int(br.get("steps") or 0)
        div = max(steps, 1) * max(int(doc.get("num_devices") or 1), 1)
        ops = tuple(OpRow(str(c["name"]), str(c["program"]), str(c["category"]), str(c.get("opcode") or ""),
                          str(c.get("named_scope") or ""), str(c.get("shape") or ""), float(c["total_time_s"]) / div,
                          float(c["total_time_s"]) / div / step_time if step_time else 0.0,
                          None if c.get("ratio") is None else float(c["ratio"]))
                    for c in doc.get("comparison") or ())
        mfu = br.get("mfu")
        name = label or ", ".join(doc.get("sources") or ()) or str(doc.get("path") or "")
        return Side(name, str(doc.get("chip") or ""), step_time, None if mfu is None else float(mfu),
                    str(br.get("program") or ""), steps,
                    float(br["predicted_s"]) if br and doc.get("roofs") is not None else None, ops)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"its fields are not a report's ({type(e).__name__}: {e})") from None


def as_side(x, label: str = "") -> Side:
    if isinstance(x, Side):
        return x
    if isinstance(x, Report):
        return side_of_report(x, label)
    if isinstance(x, dict):
        return side_of_json(x, label)
    if hasattr(x, "ops") and hasattr(x, "module") and hasattr(x, "time_s"):
        return side_of_prediction(x, label)
    raise TypeError(f"diff takes Reports or Predictions, not {type(x).__name__}")


# -- matching -------------------------------------------------------------------------------------

def match_ops(a: tuple[OpRow, ...], b: tuple[OpRow, ...]) -> tuple[list[tuple[OpRow, OpRow, MatchedBy]],
                                                                   list[OpRow], list[OpRow]]:
    """(pairs, left over in a, left over in b)."""
    pairs: list[tuple[OpRow, OpRow, MatchedBy]] = []
    by_name = {(program_key(r.program), r.name, r.kind): r for r in b}
    used_b: set[int] = set()
    rest_a = []
    for r in a:
        other = by_name.get((program_key(r.program), r.name, r.kind))
        if other is not None and id(other) not in used_b:
            pairs.append((r, other, "name"))
            used_b.add(id(other))
        else:
            rest_a.append(r)
    rest_b = [r for r in b if id(r) not in used_b]

    def key(r: OpRow) -> tuple[str, str, str, str]:
        return r.named_scope, r.kind, shape_pattern(r.shape), r.category

    programs_a = {program_key(r.program) for r in a}
    programs_b = {program_key(r.program) for r in b}
    groups: dict[tuple[str, str, str, str], list[OpRow]] = {}
    for r in sorted(rest_b, key=lambda r: -r.time_s):
        groups.setdefault(key(r), []).append(r)
    left_a = []
    for r in sorted(rest_a, key=lambda r: -r.time_s):
        candidates = groups.get(key(r)) or []
        program = program_key(r.program)
        # an op pairs within its program where both sides run that program (an evaluation's matmul is not the step's,
        # nor a slice a matmul: each side's own category); a program one side alone runs (renamed, or a prediction's
        # against a run's) pairs with another such
        pick = next((c for c in candidates if program_key(c.program) == program), None)
        if pick is None and program not in programs_b:
            pick = next((c for c in candidates if program_key(c.program) not in programs_a), None)
        if pick is not None and (r.named_scope or r.shape):  # no scope and no shape: nothing to match on
            candidates.remove(pick)
            pairs.append((r, pick, "scope+opcode+shape"))
        else:
            left_a.append(r)
    left_b = [r for rows in groups.values() for r in rows]
    return pairs, left_a, sorted(left_b, key=lambda r: -r.time_s)


def category_rows(a: Side, b: Side) -> list[CategoryDiff]:
    ta: dict[str, float] = {}
    tb: dict[str, float] = {}
    for r in a.ops:
        ta[r.category] = ta.get(r.category, 0.0) + r.time_s
    for r in b.ops:
        tb[r.category] = tb.get(r.category, 0.0) + r.time_s
    cats = sorted(set(ta) | set(tb), key=lambda c: -max(ta.get(c, 0.0), tb.get(c, 0.0)))
    return [CategoryDiff(c, ta.get(c, 0.0), tb.get(c, 0.0),
                         ta.get(c, 0.0) / a.step_time_s if a.step_time_s else 0.0,
                         tb.get(c, 0.0) / b.step_time_s if b.step_time_s else 0.0) for c in cats]


def diff(a, b, label_a: str = "", label_b: str = "") -> Diff:
    """What changed from ``a`` to ``b`` (Reports, or a Prediction and a Report)."""
    sa, sb = as_side(a, label_a), as_side(b, label_b)
    pairs, left_a, left_b = match_ops(sa.ops, sb.ops)
    kinds_a = {r.kind for r in sa.ops}
    kinds_b = {r.kind for r in sb.ops}
    ops = [OpDiff(x.name, y.name, x.program, y.program, x.category, x.kind, x.named_scope or y.named_scope,
                  x.shape, y.shape, how, x.time_s, y.time_s, x.share, y.share, x.ratio, y.ratio)
           for x, y, how in pairs]
    ops.sort(key=lambda o: -max(o.time_a_s, o.time_b_s))
    notes = []
    if sa.chip != sb.chip:
        notes.append(f"different chips ({sa.chip or 'none'} vs {sb.chip or 'none'}): rooflines and MFU are each "
                     "side's own")
    return Diff(
        sa.label, sb.label, sa.chip, sb.chip,
        StepDiff(sa.program, sb.program, sa.steps, sb.steps, sa.step_time_s, sb.step_time_s, sa.mfu, sb.mfu,
                 sa.predicted_s, sb.predicted_s),
        category_rows(sa, sb), ops,
        appeared=[r for r in left_b if r.kind not in kinds_a],
        disappeared=sorted((r for r in left_a if r.kind not in kinds_b), key=lambda r: -r.time_s),
        unmatched=[("a", r) for r in left_a if r.kind in kinds_b] + [("b", r) for r in left_b if r.kind in kinds_a],
        notes=notes,
    )
