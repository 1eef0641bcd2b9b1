"""The public convenience layer: what ``rl.analyze`` / ``rl.diff`` / ``rl.check`` do before the
pure analysis (reading the memory files of a run, loading logdirs, reading a budget file)."""

from __future__ import annotations

from pathlib import Path

from rooflens.analysis import Report
from rooflens.analysis import analyze as analyze_profile
from rooflens.hardware import Chip
from rooflens.memory import read_run_memory
from rooflens.trace import Profile, load


def load_report(paths: str | list[str], hlo_dir: str | None = None, chip: str | Chip | None = None,
                include_warmup: bool = False, before_analysis=None, workers: int = 1, engine: str = "local",
                ray_address: str | None = None) -> Report:
    """Logdirs, run directories or trace files read and analysed: the one load → analyze pipeline of
    ``rooflens report``, ``diff`` and ``check``. ``before_analysis(profile)`` runs in between (the CLI
    calibrates a CPU it has never measured there). With no chip given and none to be had, the report
    has no roofline but every other finding."""
    prof = load(paths, hlo_dir=hlo_dir, workers=workers, engine=engine, ray_address=ray_address)
    if include_warmup:
        from rooflens.trace.warmup import with_warmup

        prof = with_warmup(prof)
    if before_analysis is not None:
        before_analysis(prof)
    return analyze_profile(prof, chip=chip, memory=read_run_memory(prof), require_roofline=False)


def saved_report(path: str):
    """A report saved by ``rooflens report --out`` (one side of a diff), or None when ``path`` is not a
    saved report's name (a logdir, a run directory, a trace file)."""
    import json

    from rooflens.analysis.diff import side_of_json
    from rooflens.errors import existing

    if not path.endswith(".json") or "://" in path:
        return None
    existing(path)
    if Path(path).is_dir():
        return None
    try:
        return side_of_json(json.loads(Path(path).read_bytes()), path)
    except (OSError, ValueError, RecursionError) as e:
        from rooflens.errors import RooflensError

        raise RooflensError(f"{path} is not a saved rooflens report: "
                            f"{str(e).splitlines()[0] if str(e) else e}.") from None


def analyze(profile: Profile, chip: str | Chip | None = None) -> Report:
    """``rooflens.analysis.analyze`` with the run's memory data read from beside its trace."""
    return analyze_profile(profile, chip=chip, memory=read_run_memory(profile))


def as_report(x, chip: str | Chip | None = None) -> Report:
    """A Report from a Report, a Profile, or a logdir / trace path."""
    if isinstance(x, Report):
        return x
    if isinstance(x, Profile):
        return analyze(x, chip=chip)
    if isinstance(x, str | Path):
        return analyze(load(x), chip=chip)
    raise TypeError(f"expected a Report, a Profile or a path, not {type(x).__name__}")


def diff(a, b, chip: str | Chip | None = None, label_a: str = "", label_b: str = ""):
    """What changed from ``a`` to ``b``: Reports, Profiles, logdirs, or a Prediction and a Report."""
    from rooflens.analysis.diff import diff as diff_sides
    from rooflens.cost import Prediction

    def side(x, label):
        if isinstance(x, Prediction):
            return x, label
        if isinstance(x, str | Path):
            return as_report(x, chip), label or str(x)
        return as_report(x, chip), label

    (ra, la), (rb, lb) = side(a, label_a), side(b, label_b)
    return diff_sides(ra, rb, la, lb)


def load_budget(budget):
    """A Budget from a Budget, a TOML file path, or a dict of the same keys."""
    from rooflens.analysis.budget import Budget, BudgetError, budget_from_mapping, parse_budget

    if isinstance(budget, Budget):
        return budget
    if isinstance(budget, dict):
        return budget_from_mapping(budget, "the budget")
    p = Path(budget)
    if p.is_dir():
        raise BudgetError(f"budget file {budget} is a directory; give a TOML file of budgets.")
    if not p.is_file():
        raise BudgetError(f"budget file {budget} does not exist.")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BudgetError(f"cannot read budget file {budget} ({e}).") from None
    return parse_budget(text, str(budget))


def check(report, budget):
    """Measure every budget on ``report`` (a Report, Profile or logdir); raise AssertionError naming
    every violated one (pytest shows it), else return the CheckResult."""
    from rooflens.analysis.budget import evaluate

    result = evaluate(as_report(report), load_budget(budget))
    if not result.ok:
        raise AssertionError(result.message())
    return result
