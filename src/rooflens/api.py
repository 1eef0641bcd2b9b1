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
                ray_address: str | None = None, merge: str = "auto", step_fn: str | None = None) -> Report:
    """Logdirs, run directories or trace files read and analysed: the one load → analyze pipeline of
    ``rooflens report``, ``diff`` and ``check``. ``before_analysis(profile)`` runs in between (the CLI
    calibrates a CPU it has never measured there). With no chip given and none to be had, the report
    has no roofline but every other finding. ``step_fn``: the step program (a function or program name)."""
    prof = load(paths, hlo_dir=hlo_dir, workers=workers, engine=engine, ray_address=ray_address, merge=merge,
                include_warmup=include_warmup, step_fn=step_fn)
    if before_analysis is not None:
        before_analysis(prof)
    return analyze_profile(prof, chip=chip, memory=_memory_beside(prof), require_roofline=False)


def _memory_beside(profile: Profile):
    """The run's memory files read (and the HLO parsed, which they need) on a thread of their own while the analysis
    groups the events (compiled loops and numpy, which let go of the GIL): a Future of ``read_run_memory``."""
    from concurrent.futures import Future
    from threading import Thread

    done: Future = Future()

    def read() -> None:
        try:
            done.set_result(read_run_memory(profile))
        except BaseException as e:  # noqa: BLE001 - raised in the analysis's thread, where the memory is used
            done.set_exception(e)

    Thread(target=read, name="rooflens-memory", daemon=True).start()
    return done


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


def analyze(profile: Profile, chip: str | Chip | None = None, plan=None, plan_batch_tokens: float | None = None,
            plan_seq_len: int | None = None) -> Report:
    """``rooflens.analysis.analyze`` with the run's memory data read from beside its trace.

    ``plan`` (a ``rl.plan.Transformer`` or a preset name) sets the model's first-principles plan against the
    run: ``rep.plan`` is a PlanCheck (tokens per step from ``plan_batch_tokens``, else inferred from the measured
    model FLOPs; ``plan_seq_len`` adds attention FLOPs)."""
    rep = analyze_profile(profile, chip=chip, memory=_memory_beside(profile))
    if plan is not None:
        rep.plan = plan_check(rep, plan, plan_batch_tokens, plan_seq_len)
    return rep


def plan_check(rep: Report, model, batch_tokens: float | None = None, seq_len: int | None = None, **kwargs):
    """The PlanCheck of ``model`` (a Transformer or a preset name / TOML file) against an analysed run."""
    from rooflens.errors import RooflensError
    from rooflens.plan import check_plan
    from rooflens.plan import model as preset

    m = preset(model) if isinstance(model, str) else model
    if rep.roofs is None or rep.steps is None:
        raise RooflensError(f"the run has no roofline or no steps to set the plan against ({rep.chip_reason}).")
    peak_bytes = rep.memory.peak_bytes if rep.memory else None
    return check_plan(m, rep.chip, rep.num_devices, rep.roofs.mfu_peak_flops_per_s, rep.steps.step_time_s,
                      rep.steps.model_flops, peak_bytes, batch_tokens, seq_len, report_mfu=rep.steps.mfu, **kwargs)


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
