"""What each MCP tool computes: the command line's own pipeline, returning JSON documents.

These run in the tool call's child process (:mod:`rooflens.mcp.child`), never in the server: a
user's module, JAX and the trace readers keep the server's stdout (the protocol) clean, and a
timeout ends them whole. Bad input raises :class:`rooflens.errors.RooflensError` with the sentence the
command line prints. ``rooflens run`` is the command itself (the server starts it), not a function here.
"""

from __future__ import annotations

import collections
import difflib
import os
from dataclasses import asdict

from rooflens.errors import RooflensError
from rooflens.mcp.summary import DEFAULT_MAX_BYTES, DEFAULT_TOP, cut_text, report_summary, rows_summary

BODY_LINES = 24  # a fusion's (or loop's) body lines shown with one op
LINE_CHARS = 240  # of each body line (their metadata repeats the op's source)
SOURCE_FRAMES = 12  # of an op's Python stack, innermost first
HLO_LISTS = ("collectives", "largest_buffers", "warnings")  # an HLO summary's lists, paged
LIST_ROWS = 16  # of an op's operands, users, layout lines… (a loop's tuple can hold hundreds)
TEXT_CHARS = 2000  # of an op's HLO line or shape (a loop's tuple shape can run to many kB)
CLOSE_NAMES = 5  # "did you mean" names for an op the trace does not have
REPORTS_KEPT = 2  # analysed runs a serving child keeps (a diff's two sides; a pod's report can take GBs)


def _paths(path: str | list[str]) -> list[str]:
    paths = [path] if isinstance(path, str) else list(path)
    if not paths or not all(isinstance(p, str) and p for p in paths):
        raise RooflensError("give a logdir, run directory or trace file as path (or a list of them).")
    return paths


def identity(paths: list[str]) -> tuple | None:
    """What the files under ``paths`` are now (each file's path, size, modification time and inode), so a
    kept report is used only while its inputs are unchanged; None for a bucket URL (not kept)."""
    out = []
    for p in paths:
        if "://" in p:
            return None
        top = os.path.abspath(p)
        try:
            st = os.stat(top)
        except OSError:
            out.append((top, None))
            continue
        if not os.path.isdir(top):
            out.append((top, st.st_size, st.st_mtime_ns, st.st_ino))
            continue
        for root, dirs, files in os.walk(top):
            dirs.sort()
            for f in sorted(files):
                try:
                    fst = os.stat(os.path.join(root, f))
                except OSError:
                    continue
                out.append((os.path.join(root, f), fst.st_size, fst.st_mtime_ns, fst.st_ino))
    return tuple(out)


_KEPT: collections.OrderedDict = collections.OrderedDict()  # identity → Report, the newest last


def _report(path: str | list[str], chip: str | None = None, hlo: str | None = None, include_warmup: bool = False):
    """The Report ``rooflens report`` makes of ``path`` (calibrating a CPU once, as it does). A process that
    answers several calls (``child --serve``) keeps the last :data:`REPORTS_KEPT` of them, each used again
    only for the same arguments and unchanged files."""
    from rooflens.cli.common import load_report, need_dir

    if hlo:
        need_dir(hlo, "--hlo")
    paths = _paths(path)
    files = identity(paths + ([hlo] if hlo else []))
    key = None if files is None else (tuple(paths), chip, hlo, include_warmup, files)
    if key is not None and key in _KEPT:
        _KEPT.move_to_end(key)
        return _KEPT[key]
    rep = load_report(paths, hlo, chip, include_warmup, workers=os.cpu_count() or 1)
    if key is not None:
        _KEPT[key] = rep
        while len(_KEPT) > REPORTS_KEPT:
            _KEPT.popitem(last=False)
    return rep


def report(path: str | list[str], chip: str | None = None, hlo: str | None = None, top: int = DEFAULT_TOP,
           offset: int = 0, full: bool = False, include_warmup: bool = False,
           max_bytes: int = DEFAULT_MAX_BYTES) -> dict:
    """The report of a run: one page of it (:func:`report_summary`), or all of it with ``full``."""
    doc = _report(path, chip, hlo, include_warmup).to_json()
    return doc if full else report_summary(doc, top, offset, max_bytes)


def _match(rep, name: str, program: str | None):
    """(program, its OpComparison or None, its OpStat or None) for op ``name``; with no program, the program
    where it took the most time. The other programs that have an op of that name come back too."""
    rows = [c for c in rep.comparison if c.name == name]
    stats = [s for s in rep.op_stats if s.name == name]
    known = {c.program for c in rows} | {s.program for s in stats}
    known |= {p for p, m in rep.modules.items() if m is not None and m.find(name) is not None}
    if program is not None and program not in known:
        if known:
            raise RooflensError(f"op {name!r} is in {', '.join(sorted(known))}, not in program {program!r}.")
        programs = sorted({c.program for c in rep.comparison})
        if program not in programs and programs:
            raise RooflensError(f"the trace has no program {program!r} (its programs: {', '.join(programs[:8])}).")
    if not known:
        names = sorted({c.name for c in rep.comparison if program is None or c.program == program})
        close = difflib.get_close_matches(name, names, n=CLOSE_NAMES, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else (
            f" Its costliest ops: {', '.join(c.name for c in rep.comparison[:CLOSE_NAMES])}." if rep.comparison else "")
        raise RooflensError(f"the trace has no op named {name!r}.{hint}")
    if program is None:
        timed = {c.program: c.total_time_s for c in rows}
        program = max(sorted(known), key=lambda p: timed.get(p, -1.0))
    row = next((c for c in rows if c.program == program), None)
    stat = next((s for s in stats if s.program == program), None)
    return program, row, stat, sorted(known - {program})


def _explained(module, name: str) -> dict | None:
    """``rooflens hlo --op``'s explanation, bounded: a loop's tuple of hundreds of buffers, or a fusion of
    hundreds of operands, shows its first rows and says how many there are."""
    from rooflens.cost.counts import explain_op

    if module is None or module.find(name) is None:
        return None
    exp = explain_op(module, name).to_dict()
    for key in ("text", "source"):  # the op's line and source are given on their own
        exp.pop(key, None)
    for comp, lines in list(exp.get("called", {}).items()):
        shown = [cut_text(line, LINE_CHARS) for line in lines[:BODY_LINES]]
        exp["called"][comp] = shown + ([f"… {len(lines) - BODY_LINES} more lines"] if len(lines) > BODY_LINES else [])
    for key, value in list(exp.items()):
        if isinstance(value, list) and len(value) > LIST_ROWS:
            exp[key], exp[f"{key}_total"] = value[:LIST_ROWS], len(value)
        elif isinstance(value, str):
            exp[key] = cut_text(value, TEXT_CHARS)
    return exp


def _frames(module, ins) -> list[str]:
    """The user's Python stack that made ``ins``, innermost first: ``file:line function`` (rooflens's own frames,
    click's and runpy's left out, as the report's op detail does)."""
    from rooflens.hlo.explain import user_frames

    frames, left_out = user_frames(module, ins)
    shown = [f"{f.file}:{f.line}" + (f" {f.function}" if f.function else "") for f in frames[:SOURCE_FRAMES]]
    return (shown + ([f"… {len(frames) - SOURCE_FRAMES} outer frames"] if len(frames) > SOURCE_FRAMES else [])
            + ([f"({left_out} frames of rooflens, click, runpy or a test runner left out)"] if left_out else []))


def op(path: str | list[str], name: str, program: str | None = None, chip: str | None = None,
       hlo: str | None = None) -> dict:
    """One op of a run: its measurement, its roofline and the arithmetic behind it, its HLO line and
    the Python source that made it, and the findings that name it."""
    from rooflens.analysis.report import SCHEMA_VERSION

    rep = _report(path, chip, hlo)
    program, row, stat, elsewhere = _match(rep, name, program)
    module = rep.modules.get(program)
    ins = module.find(name) if module is not None else None
    comparison = None
    if row is not None:
        comparison = {k: v for k, v in asdict(row).items() if k not in ("explanation", "hlo")}
        comparison["shape"] = cut_text(comparison["shape"], TEXT_CHARS)
    source = _frames(module, ins) if ins is not None else []
    named = [f for f in rep.findings if any(o.program == program and o.name == name for o in f.ops)]
    return {
        "schema_version": SCHEMA_VERSION, "path": rep.path, "chip": rep.chip, "chip_reason": rep.chip_reason,
        "program": program, "name": name,
        "measured": asdict(stat) if stat is not None else None,
        "comparison": comparison,
        "arithmetic": list(row.explanation) if row is not None else [],
        "hlo_text": cut_text(ins.text.strip(), TEXT_CHARS) if ins is not None else "",
        "hlo_line": ins.line if ins is not None else None,
        "op_name": ins.op_name if ins is not None else "",
        "named_scope": ins.named_scope if ins is not None else (row.named_scope if row is not None else ""),
        "source": source,
        "explained": _explained(module, name),
        "findings": [{"rule": f.rule, "severity": f.severity, "title": f.title, "recoverable_s": f.recoverable_s,
                      "time_s": f.time_s, "fix": f.fix} for f in named],
        "other_programs": elsewhere,
        "notes": ([] if row is not None else [f"{name} has no measured time in {program} (it did not run in the "
                                               "trace, or it is inside a fusion)"])
                 + ([] if ins is not None else [f"no HLO of {program} to show {name}'s line and source (give hlo: "
                                                "an XLA dump directory)"]),
    }


def predict(source: str, chip: str, args: list[str] | None = None, mesh: str | None = None,
            topology: str | None = None, top: int = DEFAULT_TOP, max_bytes: int = DEFAULT_MAX_BYTES) -> dict:
    """``rooflens predict``: a FILE.py:FUNCTION with argument specs, or an HLO file, on ``chip``; the
    costliest ``top`` ops with their arithmetic."""
    from rooflens.cli.predict import prediction

    pred = prediction(source, chip, tuple(args or ()), mesh, topology, quiet=True)
    doc = pred.to_dict()
    doc["ops"] = sorted(doc["ops"], key=lambda o: -(o.get("total_s") or 0.0))
    return rows_summary(doc, ("ops",), top, 0, max_bytes, call="predict")


def plan(model: str | None = None, config: str | None = None, chip: str | None = None, chips: int | None = None,
         batch_tokens: float | None = None, mfu: float | None = None, tokens: float | None = None,
         topology: str | None = None, seq_len: int | None = None, checkpoints: str = "1", decode: bool = False,
         batch: int | None = None, context: int | None = None, kv_dtype: str = "bf16",
         param_dtype: str = "bf16") -> dict:
    """``rooflens plan``: a model's training step (or decode step) from first principles."""
    from rooflens.cli.plan import make_plan, plan_doc

    m, result = make_plan(model, config, chip, chips, batch_tokens, mfu, tokens, topology, seq_len, checkpoints,
                          decode, batch, context, kv_dtype, param_dtype)
    return plan_doc(m, result, decode)


def diff(a: str, b: str, chip: str | None = None, chip_b: str | None = None, top: int = DEFAULT_TOP,
         offset: int = 0, max_bytes: int = DEFAULT_MAX_BYTES) -> dict:
    """``rooflens diff A B``: what changed, with the matched ops cut to one page."""
    from rooflens.analysis.diff import diff as diff_reports
    from rooflens.api import saved_report

    ra = saved_report(a) or _report(a, chip)
    rb = saved_report(b) or _report(b, chip_b or chip)
    doc = diff_reports(ra, rb, a, b).to_json()
    return rows_summary(doc, ("ops", "appeared", "disappeared", "unmatched"), top, offset, max_bytes, call="diff")


def check(path: str, budget: str | dict, chip: str | None = None) -> dict:
    """``rooflens check``: every budget with its measured value; ``ok`` false names the violated ones.
    ``budget`` is a TOML file, or a dict of the same keys."""
    from rooflens.analysis.budget import evaluate
    from rooflens.api import load_budget

    b = load_budget(budget)  # a bad budget fails before the trace is read
    result = evaluate(_report(path, chip), b)
    return {**result.to_json(), "message": "" if result.ok else result.message()}


def hlo(path: str, op: str | None = None, top: int = DEFAULT_TOP, max_bytes: int = DEFAULT_MAX_BYTES) -> dict:
    """``rooflens hlo``: an HLO file's summary, or one op of it in plain words with its FLOPs."""
    from rooflens.cli.common import no_such_op, parse_hlo_file
    from rooflens.hlo.explain import summarize

    module = parse_hlo_file(path)
    if op:
        if module.find(op) is None:
            raise no_such_op(module, op, path)
        ins = module.find(op)
        return {"file": path, **_explained(module, op), "hlo_text": cut_text(ins.text.strip(), TEXT_CHARS),
                "hlo_line": ins.line, "op_name": ins.op_name, "source": _frames(module, ins)}
    doc = {"file": path, **summarize(module).to_dict()}
    return rows_summary(doc, HLO_LISTS, top, 0, max_bytes, call="hlo")


def chips(name: str | None = None) -> dict:
    """``rooflens chips``: the catalogue (one entry per JAX device), or one chip with every figure's source."""
    from rooflens import hardware as C

    if name:
        return C.chip(name).to_dict()
    return {"chips": [dict(r.__dict__) for r in C.chip_rows()]}


TOOLS = {f.__name__: f for f in (report, op, predict, plan, diff, check, hlo, chips)}
