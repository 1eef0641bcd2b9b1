"""The hosts of one run, read, as one :class:`~rooflens.trace.profile.Profile`: their clocks aligned, one time
axis, the job's steps, the run's manifest and HLO, the dispatches matched with the executions, warm-up judged.

``rl.load`` (:mod:`rooflens.trace.loading`) calls :func:`assemble` on the hosts' raw traces; the pod reduce
(:mod:`rooflens.trace.reduce`) uses its pieces on the hosts' aggregates.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import mmap
import re
from pathlib import Path

import numpy as np

from rooflens.errors import RooflensError
from rooflens.trace import command_buffers, discover, formats, fs, memo
from rooflens.trace.events import EventTable, concat
from rooflens.trace.formats.raw import RawTrace, assign_steps
from rooflens.trace.groupby import unique_values
from rooflens.trace.manifest import RunManifest
from rooflens.trace.profile import Profile, read_hlo_dir

XSPACE = formats.by_name("xspace").suffixes[0]


def _embedded_hlo(raws: list[RawTrace], files: list[str], table: EventTable, skip: set[str] = frozenset()
                  ) -> dict[str, str]:
    """Program → HLO text from the XSpaces' metadata plane (decoded with the events; for a Chrome
    trace, from its sibling XSpace), printed by jaxlib once per distinct module (the hosts of one
    job all carry the same programs).

    A program name compiled several times (``jit_dot(5)``, ``jit_dot(21)``) keeps the module whose
    instruction names cover most of the ops the trace ran under that name.
    """
    from rooflens.trace.formats.xspace.hlo_protos import hlo_protos

    seen: dict[str, set[str]] = {}
    for p, n in table.pairs().tolist():
        seen.setdefault(table.programs[p], set()).add(table.names[n])
    exact = {raw: shown for shown, raw in table.program_keys.items()}
    wanted: dict[str, bytes] = {}
    for raw, f in zip(raws, files):
        protos = raw.hlo_protos
        if not protos and not f.endswith(XSPACE) and not fs.is_url(f):
            xspace = Path(f).with_name(discover.host_of(Path(f).name) + XSPACE)
            if xspace.is_file():
                try:
                    with xspace.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                        protos = hlo_protos(mm)
                except (ValueError, IndexError, OSError):
                    protos = {}  # a damaged metadata plane: the ops just lack scopes
        for k, v in protos.items():
            base = re.sub(r"\(\d+\)$", "", k)
            if base in skip:
                continue  # its text is saved beside the trace: no need to print it
            if k not in wanted and (k in seen or k in exact or base in seen):
                wanted[k] = v
    best: dict[str, tuple[int, str]] = {}
    for key, text in _printed(wanted).items():
        if key in seen or key in exact:  # the trace names this very program (name and id)
            best[exact.get(key, key)] = (1 << 30, text)
            continue
        name = re.sub(r"\(\d+\)$", "", key)
        ops = seen.get(name)
        if not ops:
            continue
        defined = set(_DEFINED.findall(text))
        score = sum(1 for op in ops if op in defined)
        if name not in table.program_keys and score > best.get(name, (-1, ""))[0]:
            best[name] = (score, text)
    return {k: v for k, (_, v) in best.items()}


def _printed(protos: dict[str, bytes]) -> dict[str, str]:
    """:func:`~rooflens.trace.formats.xspace.hlo_protos.print_modules` of ``protos``, remembered for the same protos,
    printing code and jaxlib (:mod:`rooflens.trace.memo`): a second report of the trace loads no jaxlib."""
    from rooflens.trace.formats.xspace.hlo_protos import print_modules

    if not protos:
        return {}
    h = hashlib.sha1()
    for name in sorted(protos):
        h.update(hashlib.sha1(name.encode()).digest() + hashlib.sha1(protos[name]).digest())
    key = (h.hexdigest(), _jaxlib_identity(), memo.sources_digest("trace/formats/xspace/hlo_protos.py"))
    return memo.remembered("printed_hlo", key, 1, lambda: print_modules(protos), disk_min=1)


def _jaxlib_identity() -> tuple:
    """Which jaxlib would print HLO here: its version file's path, size and time (found, not imported: importing
    jaxlib or importlib.metadata costs a small report 25-60 ms); () when there is none."""
    try:
        spec = importlib.util.find_spec("jaxlib")
        if spec is None or not spec.submodule_search_locations:
            return ()
        version = Path(next(iter(spec.submodule_search_locations))) / "version.py"
        st = version.stat()
    except (ImportError, ValueError, OSError, StopIteration):
        return ()
    return str(version), st.st_size, st.st_mtime_ns


_DEFINED = re.compile(r"(?:^|\s)%?([^\s=%]+) = ", re.M)  # the instruction names a module's text defines


def parsed_hlo(hlo_texts: dict[str, str], program: str):
    """The parsed HLO of ``program`` (``jit_dot(49)``, else its name's), or None when there is none or it cannot
    be read."""
    from rooflens import hlo as H

    text = hlo_texts.get(program) or hlo_texts.get(re.sub(r"\(\d+\)$", "", program))
    try:
        return H.parse(text) if text else None
    except H.HloParseError:
        return None


def job_steps(steps_by_host: list[list[tuple[int, float, float]]]) -> list[tuple[int, float, float]]:
    """The job's steps: one per step number, from the first host's start to the last host's end (hosts
    share one time axis; a step of a multi-host job is over when its slowest host is done, and the next begins
    no earlier: hosts whose steps follow each other without a gap start the next one at slightly different
    times, and the job's steps would overlap by that)."""
    if len(steps_by_host) == 1:
        return steps_by_host[0]
    merged: dict[int, tuple[float, float]] = {}
    for host_steps in steps_by_host:
        for n, s, e in host_steps:
            a, b = merged.get(n, (s, e))
            merged[n] = (min(a, s), max(b, e))
    steps = sorted((n, s, e) for n, (s, e) in merged.items())
    for k in range(1, len(steps)):
        (m, a, b), (n, s, e) = steps[k - 1], steps[k]
        if s < b:  # the boundary: the slowest host's end of the step before, never past this step's end
            cut = max(min(b, e), a)
            steps[k - 1], steps[k] = (m, a, cut), (n, cut, max(e, cut))
    return steps


def has_saved_hlo(run: str) -> bool:
    return not fs.is_url(run) and (Path(run) / "hlo").is_dir()


def run_manifest(runs: list[str], notes: list[str]) -> RunManifest:
    """The first run's ``rooflens.json``, typed (its problems added to ``notes``); empty when none has one."""
    for run in runs:
        text = fs.read_text(fs.join(run, "rooflens.json"))
        if text is None:
            continue
        try:
            manifest = RunManifest.from_dict(json.loads(text), fs.join(run, "rooflens.json"))
            notes.extend(manifest.problems)
            stopped = manifest.extra.get("trace_stopped")  # rooflens run's memory watch (capture/memwatch.py)
            if isinstance(stopped, dict) and isinstance(stopped.get("said"), str):
                notes.append(stopped["said"])
            return manifest
        except ValueError:
            notes.append(f"{fs.join(run, 'rooflens.json')} is not valid JSON; ignored")
            return RunManifest()
    return RunManifest()


def saved_hlo(runs: list[str], hlo_dir: str | Path | None) -> dict[str, str]:
    """HLO text files beside the trace (``rl.capture``, ``rooflens run``) or given: the first run's win."""
    saved: dict[str, str] = {}
    for run in reversed(runs):
        if has_saved_hlo(run):
            saved.update(read_hlo_dir(Path(run) / "hlo"))
    if hlo_dir is not None:
        saved.update(read_hlo_dir(hlo_dir))
    return saved


def shifted(steps, shift_ps: int) -> list[tuple[int, float, float]]:
    """A host's steps (ps from its own origin) in ns from an origin ``shift_ps`` earlier."""
    return sorted((n, (s + shift_ps) * 1e-3, (e + shift_ps) * 1e-3) for n, s, e in steps)


def assemble(paths: list[str], runs: list[str], raws: list[RawTrace], files: list[str],
             hlo_dir: str | Path | None = None, step_fn: str | None = None) -> Profile:
    """The hosts read (``raws``, in the order of ``files``) as one profile: one time axis, the job's steps (the
    device's work: :mod:`rooflens.trace.steps`), the run's manifest and HLO, its warm-up judged. ``step_fn``: the
    step program's name (``--step-fn``), else chosen (:func:`rooflens.trace.steps.choose`)."""
    from rooflens.trace.align import aligned_hosts

    raws, clock_notes = aligned_hosts(raws)  # hosts on clocks of their own (Nsight sessions): one time axis
    table = concat([r.table for r in raws])
    marked_by_host = [shifted(r.steps, (r.table.origin_ns - table.origin_ns) * 1000) for r in raws]
    notes = [n for r in raws for n in r.notes] + clock_notes
    shift_ns = {r.host: float(r.table.origin_ns - table.origin_ns) for r in raws}
    dispatches_of = {r.host: {fn: d * 1e-3 + shift_ns[r.host] for fn, d in r.dispatches.items()} for r in raws
                     if r.dispatches}
    end_ns_of = {r.host: r.end_ps * 1e-3 + shift_ns[r.host] for r in raws if r.end_ps}
    manifest = run_manifest(runs, notes)
    saved = saved_hlo(runs, hlo_dir)
    # a program the trace names plainly (compiled once) is served by its saved text: its proto need not be
    # printed; one compiled several times (jit_dot(5), jit_dot(49)) keeps its own module from the trace
    hlo_texts = _embedded_hlo(raws, files, table, skip={k for k in saved if k in table.programs})
    hlo_texts.update(saved)
    table, said, in_buffers = command_buffers.attribute(table, functools.cache(lambda p: parsed_hlo(hlo_texts, p)))
    notes += said
    steps_by_host, choice = marked_as_device_steps(table, raws, marked_by_host, dispatches_of, step_fn, manifest)
    for k, host_steps in enumerate(steps_by_host):  # each host's steps hold its own events
        assign_steps(table, host_steps, rows=None if len(raws) == 1 else
                     np.flatnonzero(table.host == table.hosts.index(raws[k].host)))
    steps = job_steps(steps_by_host)
    if not len(table):
        from rooflens.trace.dispatch import unran_dispatches, unran_note

        none = (np.zeros((0, 4), np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0, bool))
        queued = [u for u in unran_dispatches(table, none, dispatches_of, end_ns_of) if u.queued]
        made = next((r.framework for r in raws if r.framework), "")
        ended = manifest.exit or {}  # rooflens run: how the script ended
        why = (("; " + unran_note(queued[0], stats=False) + ".") if queued
               else f": the run stopped at an exception before anything ran on a device ({ended['message'][:300]})"
               if ended.get("kind") == "exception" and ended.get("message")
               else f": a {made} trace with no kernel on any device" + (" either." if made == "JAX" else ".")
               if made else ": was anything running on the devices while it was traced?")
        raise RooflensError(f"{', '.join(paths)} has no device op events (no XLA ops or GPU kernels on any device "
                            f"or CPU thread){why}")
    platform = next((r.platform for r in raws if r.platform != "unknown"), "unknown")
    added = manifest.extra.get("xla_flags_added")
    if platform == "gpu" and isinstance(added, list) and added:  # rooflens run's whole-run trace (capture/launch.py)
        notes.append(f"traced whole, the run had XLA's command buffers off ({' '.join(map(str, added))}): a trace "
                     "open when they first run can fail the run on jaxlib 0.11, and under a profiler XLA runs them "
                     "one thunk at a time anyway, so the work traced is the same; set the flag yourself to keep them")
    if manifest.extra.get("python_tracer") is False:  # rooflens run's whole run, by default (capture/launch.py)
        notes.append("traced without JAX's Python tracer (a whole run's default in rooflens run: it can slow a "
                     "Python-heavy script tenfold), so no gap names the Python frame the host was in; "
                     "`rooflens run --python-tracer`, or a window (--steps), records them")
    host_events_of = {r.host: host_frames(r.host_events, (r.table.origin_ns - table.origin_ns) * 1000) for r in raws}
    host_events = sorted((h for evs in host_events_of.values() for h in evs), key=lambda h: h[1])
    profile = Profile(
        path=", ".join(paths), table=table, steps=steps, platform=platform,
        device_kind=next((r.device_kind for r in raws if r.device_kind != "unknown"), "unknown"),
        hosts=[r.host for r in raws], sources=files, notes=notes, metadata=manifest.to_dict(), manifest=manifest,
        framework=next((r.framework for r in raws if r.framework), ""),
        hlo_texts=hlo_texts, plane_stats=next((r.plane_stats for r in raws if r.plane_stats), {}),
        host_events=host_events, host_events_of=host_events_of, events_total=sum(r.events_total for r in raws),
        dispatches_of=dispatches_of, end_ns_of=end_ns_of, step_choice=choice,
        marked_steps=job_steps(marked_by_host) if any(marked_by_host) else [],
        command_buffer_ops=in_buffers,
    )
    if not steps:
        profile.notes.append(NO_STEPS)
    missing = sorted(p for p in {table.programs[p] for p in unique_values(table.program).tolist()}  # "": no program
                     if p and p not in hlo_texts and re.sub(r"\(\d+\)$", "", p) not in hlo_texts)
    if missing:
        profile.notes.append(no_hlo_note(missing))
    from rooflens.trace.dispatch import unran_dispatches, unran_note
    from rooflens.trace.warmup import execution_spans, judge  # a run traced from its start: warm-up apart

    if dispatches_of:  # before warm-up is judged: every execution in the trace ran a dispatch
        profile.unran = unran_dispatches(table, execution_spans(table), dispatches_of, end_ns_of)
        profile.notes.extend(unran_note(u) for u in profile.unran)
        queued = [u for u in profile.unran if u.queued]
        device = choice is not None and choice.basis in ("dispatch", "time")  # its steps are work that ran
        if profile.steps and queued and not all(r.steps_ran for r in raws) and not device:
            profile.steps = ran_steps(profile)
        elif device and queued and len(profile.marked_steps) > len(profile.steps):
            u = max(queued, key=lambda u: (u.unran, u.missing_s))
            profile.notes.append(f"the last {len(profile.marked_steps) - len(profile.steps)} annotated step(s) "
                                 f"dispatched work of {u.program} that never ran inside the trace: left out of the "
                                 "steps")
    return judge(profile, step_fn)


def marked_as_device_steps(table: EventTable, raws: list[RawTrace], marked_by_host: list[list], dispatches_of: dict,
                           step_fn: str | None, manifest: RunManifest) -> tuple[list[list], object]:
    """Each host's marked steps as the device's work (:mod:`rooflens.trace.steps`), and the step program: the
    executions dispatched inside each marked step where the host records its dispatches, else grouped by time
    where the marks do not hold the device's work, else the marks as they are (a device Steps line, a loop that
    waits for each step). Steps an execution source already gives (Nsight's) stay as read."""
    from rooflens.trace import steps as S
    from rooflens.trace.warmup import execution_spans

    if not any(marked_by_host) or not len(table):
        return marked_by_host, None
    spans = execution_spans(table)
    out: list = []
    weight: dict[str, float] = {}
    basis = set()
    # the markers' own choice, with no dispatches to weigh it: the same for every host, made once if at all
    markers_choice = functools.cache(lambda: S.choose(table, spans[0], spans[2], spans[3], None,
                                                      window_fn=S.window_fn(manifest)))
    for r, marked in zip(raws, marked_by_host):
        host = table.hosts.index(r.host)
        if r.steps_ran or not marked:
            out.append(marked)
            basis.add("executions" if r.steps_ran else "markers")  # Nsight's steps: executions that ran
            continue
        rows = S.device_steps(table, spans, host, marked, dispatches_of.get(r.host, {}))
        if rows:
            out.append(rows)
            basis.add("dispatch")
            for row in rows:
                for f in row[3]:
                    weight[f] = weight.get(f, 0.0) + 1
            continue
        by = markers_choice()
        by_time = S.steps_by_time(table, spans, host, marked, by[0]) if by else None
        out.append(by_time or marked)
        basis.add("time" if by_time else "markers")
    auto = (S.choose(table, spans[0], spans[2], spans[3], None, preferred=weight, window_fn=S.window_fn(manifest))
            if weight else markers_choice())
    picked = S.choose(table, spans[0], spans[2], spans[3], step_fn, preferred=weight or None) if step_fn else auto
    # device steps are those that ran the step function the markers hold (chosen by --step-fn or not)
    out = [S.tiled(h, auto[0] if auto else None) if h and len(h[0]) == 5 else h for h in out]
    if picked is None:
        return out, None
    main = next(b for b in ("dispatch", "time", "executions", "markers") if b in basis)
    return out, S.make_choice(table, spans, picked[0], picked[1], main)


def ran_steps(profile: Profile) -> list[tuple[int, float, float]]:
    """The annotated steps whose work ran inside the trace: a trace that stopped with work still queued has
    steps the host annotated (and dispatched) whose work never ran; the last steps go, one per dispatch of the
    program left most unrun (said in a note). Step annotations time the host: when it runs ahead of the
    devices, a step's device work runs inside later steps' spans."""
    u = max((u for u in profile.unran if u.queued), key=lambda u: (u.unran, u.missing_s))
    steps = sorted(profile.steps)
    keep = max(len(steps) - u.unran, 0)
    if keep < len(steps):
        profile.notes.append(f"the last {len(steps) - keep} annotated step(s) dispatched work of {u.program} that "
                             "never ran inside the trace: left out of the steps")
        t = profile.table
        t.step[~np.isin(t.step, [n for n, _, _ in steps[:keep]])] = -1
    return steps[:keep]


NO_STEPS = ("the trace has no step annotations (jax.profiler.StepTraceAnnotation) or Steps line, so there are no "
            "per-step times")


def no_hlo_note(missing: list[str]) -> str:
    return (f"no HLO for {', '.join(missing[:5])} (the trace does not carry it): those ops have no named scope; "
            "give --hlo DUMP_DIR, or capture with rl.capture")


def host_frames(host_events, shift_ps: int) -> list[tuple[str, float, float]]:
    """A host's Python frames (ps from its own origin) in ns from an origin ``shift_ps`` earlier, by start."""
    return sorted(((name, (s + shift_ps) * 1e-3, (e + shift_ps) * 1e-3) for name, s, e in host_events),
                  key=lambda h: h[1])
