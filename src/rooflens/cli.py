"""The ``rooflens`` command: one verb per stage, each with ``--json``."""

from __future__ import annotations

import contextlib
import gzip
import math
import os
import stat
import sys
import tempfile
from importlib import resources
from pathlib import Path

import click

from rooflens.errors import RooflensError, existing

EXAMPLE_HLO = "transformer_train_step.8dev.after_optimizations.hlo.txt"


class UserError(RooflensError):
    """Bad input from the user: reported as one sentence, exit status 2."""


MAX_PARAMS = 1e15  # a quadrillion parameters: 1000x the largest models trained; beyond it is a typo


class FiniteFloat(click.FloatRange):
    """A float option within a range that is also finite (click's FloatRange lets nan and inf through)."""

    name = "finite float range"

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def _console():
    from rooflens.report.text import terminal_console

    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "160"))
    return terminal_console(highlight=False, soft_wrap=True, width=width)


def example_hlo_path() -> Path:
    return Path(str(resources.files("rooflens") / "data" / EXAMPLE_HLO))


def read_hlo_file(path: str) -> str:
    """The text of an HLO file (plain or gzipped), or a UserError saying what is wrong."""
    p = Path(path)
    existing(path)
    if p.is_dir():
        dumps = sorted(p.glob("*after_optimizations.txt")) or sorted(p.glob("*.txt"))
        hint = f", e.g. {dumps[0]}" if dumps else " (e.g. a *after_optimizations.txt file of an XLA dump)"
        raise UserError(f"{path} is a directory; give one HLO text file{hint}.")
    if not p.is_file():
        raise UserError(f"{path} is not a regular file (a device or a pipe); give one HLO text file.")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror or e}.") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            raise UserError(f"{path} is a damaged gzip file.") from None
    if not data.strip():
        raise UserError(f"{path} is empty.")
    if b"\x00" in data[:65536]:
        raise UserError(f"{path} is a binary file, not HLO text.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text (bad byte at offset {e.start}), so it is not HLO.") from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rooflens")
def cli() -> None:
    """rooflens: predict, measure and explain the performance of JAX programs."""


@cli.command()
@click.argument("file", required=False)
@click.option("--op", "op_name", metavar="NAME", help="Explain one instruction in plain words.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option("--example", is_flag=True,
              help="Read the HLO of a small transformer training step on 8 devices shipped with rooflens.")
@click.option("--graph", "graph_path", metavar="OUT.svg",
              help="With --op: write the op's dataflow graph (fusion body, operands, users) as a standalone SVG.")
@click.option("--force", is_flag=True, help="Overwrite the --graph file if it exists.")
def hlo(file: str | None, op_name: str | None, as_json: bool, example: bool, graph_path: str | None,
        force: bool) -> None:
    """Read an HLO module: a summary, or one op explained (--op NAME).

    FILE is HLO text as printed by jax.jit(f).lower(...).compile().as_text() or dumped by
    XLA_FLAGS=--xla_dump_to=DIR (plain or .gz).
    """
    from rooflens import hlo as H
    from rooflens.hlo.explain import explain, suggest_names, summarize
    from rooflens.report.hlo_view import render_explanation, render_summary

    if example == bool(file):
        raise UserError("give one HLO file, or --example to read the one shipped with rooflens.")
    path = str(example_hlo_path()) if example else file
    text = read_hlo_file(path)
    try:
        module = H.parse(text)
    except H.HloParseError as e:
        raise UserError(f"{path} is not HLO text: line {e.line}, column {e.column}: {e.message}.") from None
    if graph_path:
        _write_graph(module, path, op_name, graph_path, force)
        return
    if op_name:
        try:
            exp = explain(module, op_name)
        except KeyError:
            close = suggest_names(module, op_name)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise UserError(f"there is no instruction named {op_name!r} in {path}.{hint}") from None
        from rooflens.cost.counts import instruction_counts, model_flops

        ins = module[op_name]
        exp.flops, exp.model_flops = instruction_counts(module, ins).flops, model_flops(module, ins)
        if exp.model_flops and ins.opcode == "fusion":
            rest = exp.flops - exp.model_flops
            exp.details.append(f"dot/convolution FLOPs of this fusion (model FLOPs): {exp.model_flops:,.0f}"
                               + (f" of its {exp.flops:,.0f} FLOPs; the other {rest:,.0f} are elementwise work"
                                  if rest > 0 else ", all of its FLOPs"))
        if as_json:
            click.echo(_json_text(exp.to_dict()))
        else:
            render_explanation(_console(), exp)
        return
    summary = summarize(module)
    if as_json:
        click.echo(_json_text({"file": path, **summary.to_dict()}))
    else:
        render_summary(_console(), summary, source=path)


def _write_graph(module, path: str, op_name: str | None, out: str, force: bool) -> None:
    """``rooflens hlo FILE --op NAME --graph OUT.svg``: the op's graph, laid out, as an SVG file."""
    from rooflens.hlo.explain import suggest_names
    from rooflens.hlo.graph import op_graph
    from rooflens.report.graph_view import render_graph_svg

    if not op_name:
        raise UserError("--graph draws one op: give it with --op NAME.")
    if module.find(op_name) is None:
        close = suggest_names(module, op_name)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise UserError(f"there is no instruction named {op_name!r} in {path}.{hint}")
    target = Path(out)
    if target.exists() and not force:
        raise UserError(f"{out} already exists; give --force to overwrite it.")
    if target.parent != Path("") and not target.parent.is_dir():
        raise UserError(f"cannot write {out}: the directory {target.parent} does not exist.")
    g = op_graph(module, op_name)
    try:
        target.write_text(render_graph_svg(g), encoding="utf-8")
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}.") from None
    click.echo(f"wrote {out}: {g.opcode} {g.op}, {len(g.nodes)} nodes, {len(g.edges)} edges"
               + (f" ({'; '.join(g.notes)})" if g.notes else ""))


def _need_file(path: str, what: str, wanted: str) -> None:
    """One sentence when ``path`` is not a readable file: missing, a directory, or out of reach."""
    p = Path(path)
    existing(path, what)
    if p.is_dir():
        raise UserError(f"{what}{path} is a directory; give {wanted}.")
    if not p.is_file():
        raise UserError(f"{what}{path} is not a regular file; give {wanted}.")


def _need_dir(path: str, option: str) -> None:
    """One sentence when ``path`` (given to ``option``) is not a directory this process can list."""
    p = Path(path)
    try:
        os.listdir(p)
    except PermissionError:
        raise UserError(f"cannot list {path} (given to {option}): permission denied.") from None
    except NotADirectoryError:
        raise UserError(f"{path} (given to {option}) is a file, not a directory.") from None
    except OSError:
        raise UserError(f"{path} (given to {option}) does not exist.") from None


def _chip_files(chips_file: tuple[str, ...]) -> tuple[str, ...]:
    for f in chips_file:
        _need_file(f, "chip file ", "a TOML file of chips")
    return chips_file


@cli.command()
@click.argument("name", required=False)
@click.option("--chips", "chips_file", multiple=True, metavar="FILE", help="Also read chips from this TOML file.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def chips(name: str | None, chips_file: tuple[str, ...], as_json: bool) -> None:
    """List the chip catalogue, or show one chip with the source of every number.

    Each entry describes ONE JAX device: a TensorCore on TPU v2/v3, a chip on v4 and later, one
    GPU. Add your own with ROOFLENS_CHIPS=file.toml or --chips FILE (same format).
    """
    from rooflens import hardware as C
    from rooflens.report.cost_view import render_chip, render_chip_list

    files = _chip_files(chips_file)
    if name:
        c = C.chip(name, files)
        if as_json:
            click.echo(_json_text(c.to_dict()))
        else:
            render_chip(_console(), c)
        return
    rows = C.chip_rows(files)
    if as_json:
        click.echo(_json_text([r.__dict__ for r in rows]))
    else:
        render_chip_list(_console(), rows)


@cli.command()
@click.option("--repeats", default=7, show_default=True, type=click.IntRange(min=2, max=10_000),
              help="Timed runs per kernel (after warm-up; at least 2, so there is a spread to report).")
@click.option("--quick", is_flag=True, help="Smaller kernels and fewer runs (a rough figure in seconds).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def calibrate(repeats: int, quick: bool, as_json: bool) -> None:
    """Measure this machine's matmul FLOP/s and memory bandwidth; save them as the chip 'local'."""
    from rooflens.hardware import calibrate as K
    from rooflens.report.cost_view import render_calibration

    kw = {"repeats": 3, "sizes": (256, 512, 1024), "copy_bytes": 32 << 20} if quick else {"repeats": repeats}
    cal = K.measure(**kw)
    path = K.save(cal)
    if as_json:
        click.echo(_json_text({
            "path": str(path), "backend": cal.backend, "device_kind": cal.device_kind, "when": cal.when,
            "measurements": [{"what": m.what, "unit": m.unit, "times_s": list(m.times_s), **m.spread}
                             for m in [*(x for ms in cal.matmul.values() for x in ms), *cal.copy]],
        }))
    else:
        render_calibration(_console(), cal, path)


def _load_function(target: str):
    import importlib.util

    path, colon, name = target.rpartition(":")
    if not colon or not path or not name:
        raise UserError(f"give the function as FILE.py:NAME, not {target!r}.")
    p = Path(path)
    _need_file(path, "", "a Python file")
    spec = importlib.util.spec_from_file_location(f"rooflens_user_{p.stem}", p)
    if spec is None or spec.loader is None:
        raise UserError(f"{path} is not a Python file.")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(p.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0]
        raise UserError(f"importing {path} failed ({type(e).__name__}: {first}).") from None
    fn = getattr(module, name, None)
    if fn is None:
        found = [k for k, v in vars(module).items() if callable(v) and not k.startswith("_")][:8]
        raise UserError(f"{path} has no function {name!r} (it defines: {', '.join(found) or 'nothing callable'}).")
    if not callable(fn):
        raise UserError(f"{name} in {path} is not a function.")
    return fn


@contextlib.contextmanager
def _stdout_to_stderr():
    """Everything written to stdout meanwhile goes to stderr: Python's prints, and the file descriptor
    itself (C extensions, subprocesses, os.write), so stdout stays one JSON document."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no file descriptor 1 (a closed stdout): Python's level only
        saved = None
    try:
        if saved is not None:
            os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _mesh_devices(mesh: str | None) -> int:
    from rooflens.lowering import parse_mesh_spec

    if not mesh:
        return 0
    n = 1
    for v in parse_mesh_spec(mesh).values():
        n *= v
    return n


@cli.command()
@click.argument("target", metavar="FILE.py:FUNCTION|HLO_FILE")
@click.option("--chip", "chip_name", required=True, help="A catalogue chip (see `rooflens chips`) or 'local'.")
@click.option("--arg", "arg_specs", multiple=True, metavar="SPEC",
              help="One positional argument as dtype[dims], e.g. 'bf16[32,1024,8192]'; shard it over mesh axes "
                   "with '@data,_,_' (one entry per dimension, '_' = not sharded, 'data+model' = both).")
@click.option("--mesh", metavar="AXES", help="Device mesh as axis=size pairs, e.g. data=4,model=2 (CPU devices "
                                              "stand in for the target's).")
@click.option("--topology", metavar="SHAPE", help="TPU slice shape, e.g. 4x4 or 2x2x4: collectives are priced on "
                                                  "the torus axes their device groups span.")
@click.option("--chips", "chips_file", multiple=True, metavar="FILE", help="Also read chips from this TOML file.")
@click.option("--top", default=15, show_default=True, type=click.IntRange(min=0), help="How many ops to list.")
@click.option("--explain", is_flag=True, help="Show the arithmetic behind each listed op.")
@click.option("--json", "as_json", is_flag=True, help="Print the full prediction as JSON.")
def predict(target: str, chip_name: str, arg_specs: tuple[str, ...], mesh: str | None, topology: str | None,
            chips_file: tuple[str, ...], top: int, explain: bool, as_json: bool) -> None:
    """Predict a JAX function op by op on a chip you may not have (roofline: math, memory, links).

    TARGET is FILE.py:FUNCTION (lowered here with the --arg shapes), or an HLO text file (a dump,
    or compiled.as_text()) priced as it is.
    """
    from rooflens import hardware as C
    from rooflens.report.cost_view import render_prediction

    files = _chip_files(chips_file)
    chip = C.chip(chip_name, files)  # unknown chips fail before JAX starts
    if not target.endswith(".py") and ":" not in target.replace("\\", "/").rsplit("/", 1)[-1]:
        if arg_specs or mesh:
            raise UserError("--arg and --mesh are for FILE.py:FUNCTION; an HLO file already has its shapes.")
        from rooflens import hlo as H
        from rooflens.cost import predict_module

        text = read_hlo_file(target)
        try:
            module = H.parse(text)
        except H.HloParseError as e:
            raise UserError(f"{target} is not HLO text: line {e.line}, column {e.column}: {e.message}.") from None
        pred = predict_module(module, chip, source=f"the HLO in {target}, as written", topology=topology)
        if as_json:
            click.echo(_json_text(pred.to_dict()))
        else:
            render_prediction(_console(), pred, top=top, explain=explain)
        return
    need = _mesh_devices(mesh)
    if need and "jax" not in sys.modules:
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_force_host_platform_device_count" not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={need}".strip()
        if chip.name != C.LOCAL_CHIP:
            os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from rooflens.lowering import make_mesh, parse_arg_spec
    from rooflens.lowering import predict as run_predict

    mesh_obj = make_mesh(mesh) if mesh else None
    args = [parse_arg_spec(a, mesh_obj) for a in arg_specs]
    # the user's module may print (on import, or while it is traced): with --json that goes to stderr,
    # so stdout holds the JSON document alone
    with _stdout_to_stderr() if as_json else contextlib.nullcontext():
        fn = _load_function(target)
        pred = run_predict(fn, *args, chip=chip, mesh=mesh_obj, topology=topology)
    if as_json:
        click.echo(_json_text(pred.to_dict()))
    else:
        render_prediction(_console(), pred, top=top, explain=explain)


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--logdir", default=None, metavar="DIR", help="Where to write the profile (default: ./rooflens-logs).")
@click.option("-m", "module", default=None, metavar="MODULE", help="Run a module, as `python -m MODULE` does.")
@click.option("--steps", default=None, metavar="START:STOP", help="Trace only executions START…STOP-1 of the step "
              "program (the first jitted function called START times, or the script's StepTraceAnnotation steps).")
@click.option("--delay", "delay_s", type=float, default=None, metavar="SECONDS",
              help="With --duration: open the window this long after JAX comes up.")
@click.option("--duration", "duration_s", type=float, default=None, metavar="SECONDS",
              help="Trace this long only (after --delay), like nsys --delay/--duration.")
@click.argument("script", required=False)
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def run(logdir: str | None, module: str | None, steps: str | None, delay_s: float | None, duration_s: float | None,
        script: str | None, script_args: tuple[str, ...]) -> None:
    """Profile an unmodified Python program: `rooflens run script.py ARGS` or `rooflens run -m MODULE ARGS`.

    The program runs exactly as under `python` (its own __main__, argv, environment, exit status);
    the profiler starts when its JAX backend comes up. Writes a TensorBoard/XProf logdir with the
    HLO and memory data of every program, and prints where; `rooflens report` reads it.
    """
    from rooflens.capture.run import exec_run, window_spec

    if module is None and script is None:
        raise UserError("give a script to run (rooflens run script.py ARGS) or a module (rooflens run -m MODULE).")
    args = ([script] if module is not None and script is not None else []) + list(script_args)
    exec_run(module or script, args, logdir, module=module is not None, window=window_spec(steps, delay_s, duration_s))


def _calibrate_first_use() -> None:
    """No calibration of this CPU yet: measure it once (seconds), with a progress bar on stderr."""
    from rooflens.hardware import local_chip_path

    if local_chip_path().is_file():
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from rooflens.hardware.calibrate import QUICK, calibrate_once

    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True, highlight=False), transient=False) as progress:
        task = progress.add_task("rooflens: calibrating this CPU once for the roofline (saved as chip 'local'; "
                                 "`rooflens calibrate` measures it more closely)", total=QUICK["repeats"])
        try:
            path = calibrate_once(progress=lambda done, total: progress.update(task, completed=done))
        except Exception as e:  # no roofline then; the report says how to get one
            progress.update(task, description=f"rooflens: calibration failed ({type(e).__name__}: {e})")
            return
    click.echo(f"rooflens: calibration saved to {path}", err=True)


@cli.command()
@click.argument("logdirs", nargs=-1, required=True, metavar="LOGDIR|RUN_DIR|TRACE_FILE...")
@click.option("--hlo", "hlo_dir", metavar="DIR", help="HLO text files of the programs (an XLA dump directory), for "
                                                       "traces captured without rooflens.")
@click.option("--chip", "chip_name", help="Compare with this chip's roofline (default: inferred from the trace; a "
                                          "CPU trace uses the calibrated 'local').")
@click.option("--workers", type=click.IntRange(min=1), metavar="N",
              help="Processes reading host files side by side (default: this machine's cores).")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Read the hosts on a local process pool, or as Ray tasks (pip install 'rooflens[ray]').")
@click.option("--ray-address", metavar="ADDR", help="An existing Ray cluster (default: a local one for this call).")
@click.option("--top", default=20, show_default=True, type=click.IntRange(min=0), help="How many ops to list.")
@click.option("--json", "as_json", is_flag=True, help="Print all the stats as JSON.")
@click.option("--html", "html_path", metavar="FILE", help="Also write the single-file HTML report here.")
@click.option("--out", "json_path", metavar="FILE",
              help="Write the JSON report (schema: docs/report-schema.md) here.")
@click.option("--perfetto", "perfetto_path", metavar="FILE",
              help="Write the device ops, with their rooflines, as a Chrome trace for ui.perfetto.dev (.json[.gz]).")
@click.option("--force", is_flag=True, help="Overwrite existing --html/--out/--perfetto files.")
@click.option("--include-warmup", is_flag=True, help="Keep each program's compilation and first run in the stats "
                                                    "(a `rooflens run` profile leaves them out).")
@click.option("--no-calibrate", is_flag=True, help="On a CPU trace with no calibration yet, do not measure this "
                                                  "machine (the report then has no roofline comparison).")
def report(logdirs: tuple[str, ...], hlo_dir: str | None, chip_name: str | None, workers: int | None, engine: str,
           ray_address: str | None, top: int, as_json: bool, html_path: str | None, json_path: str | None,
           perfetto_path: str | None, force: bool, include_warmup: bool = False, no_calibrate: bool = False) -> None:
    """What ran, against its roofline: op stats, expected vs observed, the step, and findings.

    Reads TensorBoard/XProf logdirs, run directories, or *.xplane.pb / *.trace.json.gz files, from
    CPU, GPU or TPU, local or in a bucket (gs://, s3://): every host of the run, in one report.
    """
    from rooflens.report.trace_view import render_op_stats, render_report

    _check_outputs(force, ("--html", html_path), ("--out", json_path), ("--perfetto", perfetto_path))
    if hlo_dir:
        _need_dir(hlo_dir, "--hlo")
    rep = _load_report(list(logdirs), hlo_dir, chip_name, include_warmup, no_calibrate,
                       workers=workers or os.cpu_count() or 1, engine=engine, ray_address=ray_address)
    if html_path:
        from rooflens.report.html import write_html

        with _writing(html_path):
            write_html(rep, html_path)
        click.echo(f"rooflens: wrote {html_path}", err=True)
    if perfetto_path:
        if rep.roofs is None:
            raise UserError(f"the Perfetto file carries roofline times and there is none: {rep.chip_reason}")
        from rooflens.report.perfetto import write_perfetto

        with _writing(perfetto_path):
            write_perfetto(rep, perfetto_path)
        click.echo(f"rooflens: wrote {perfetto_path} (open it at ui.perfetto.dev)", err=True)
    if json_path:
        with _writing(json_path):
            Path(json_path).write_text(_json_text(rep.to_json()))
        click.echo(f"rooflens: wrote {json_path}", err=True)
    if as_json:
        click.echo(_json_text(rep.to_json()))
        return
    console = _console()
    source = ", ".join(rep.sources)
    render_op_stats(console, rep, source=source, top=top)
    render_report(console, rep, source=source, top=top)


def _check_outputs(force: bool, *targets: tuple[str, str | None]) -> None:
    """Each (option, path) to be written can be, checked before any long work: no file named twice, none
    overwritten without --force, no device or directory, the directory there and writable."""
    seen: dict[str, str] = {}
    for option, target in targets:
        if not target:
            continue
        key = os.path.realpath(target)
        if key in seen:
            raise UserError(f"{seen[key]} and {option} both name {target}; give each its own file.")
        seen[key] = option
        _check_writable(Path(target), option, force)


def _check_writable(p: Path, option: str, force: bool, replace_hint: str = "") -> None:
    try:
        st = p.stat()
    except PermissionError:
        raise UserError(f"cannot reach {p}: permission denied.") from None
    except OSError:
        st = None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise UserError(f"{p} is a directory; give a file path to {option}.")
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{p} is not a regular file (a device or a pipe); give a file path to {option}.")
        if not force:
            raise UserError(f"{p} exists; give another {option} path or --force to replace it{replace_hint}.")
    parent = p.absolute().parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise UserError(f"cannot write {p}: the directory {parent} {what}.")
    try:  # the one sure test (read-only directories and file systems, quotas, permissions)
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".rooflens-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UserError(f"cannot write {p}: {(e.strerror or str(e)).lower()} in {parent}.") from None


@contextlib.contextmanager
def _writing(path) -> object:
    """Turn a failed write (a full disk, a vanished directory) into one sentence."""
    try:
        yield
    except OSError as e:
        raise UserError(f"cannot write {path}: {(e.strerror or str(e)).lower()}.") from None


def _json_text(doc) -> str:
    """The JSON rooflens prints or writes (indented; see :func:`rooflens.report.text.json_text`)."""
    from rooflens.report.text import json_text

    return json_text(doc)


def _load_report(logdir: str | list[str], hlo_dir: str | None = None, chip_name: str | None = None,
                 include_warmup: bool = False, no_calibrate: bool = False, workers: int = 1, engine: str = "local",
                 ray_address: str | None = None):
    """A logdir read and analysed: its memory files read here, the analysis pure. With no chip given
    and none to be had (a CPU never calibrated), the report has no roofline but every other finding."""
    from rooflens.analysis import analyze
    from rooflens.memory import read_run_memory
    from rooflens.trace import load

    prof = load(logdir, hlo_dir=hlo_dir, workers=workers, engine=engine, ray_address=ray_address)
    if include_warmup:
        from rooflens.trace.warmup import with_warmup

        prof = with_warmup(prof)
    if chip_name is None and prof.platform == "cpu" and not no_calibrate:
        _calibrate_first_use()
    return analyze(prof, chip=chip_name, memory=read_run_memory(prof), require_roofline=False)


def _saved_report(path: str):
    """A report saved by ``rooflens report --out`` as one side of a diff, or None for anything else
    (a logdir, a run directory, a trace file)."""
    import json

    from rooflens.analysis.diff import side_of_json

    if not path.endswith(".json") or "://" in path:
        return None
    existing(path)
    if Path(path).is_dir():
        return None
    try:
        return side_of_json(json.loads(Path(path).read_bytes()), path)
    except (OSError, ValueError, RecursionError) as e:
        raise UserError(f"{path} is not a saved rooflens report: {str(e).splitlines()[0] if str(e) else e}.") \
            from None


@cli.command()
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@click.option("--chip", "chip_name", help="Compare both with this chip's roofline (default: each from its trace).")
@click.option("--chip-b", "chip_b", help="B's chip, when it differs from A's (a run on another chip).")
@click.option("--top", default=20, show_default=True, type=click.IntRange(min=0),
              help="How many matched ops to list.")
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@click.option("--html", "html_path", metavar="FILE", help="Also write the diff as a single-file HTML page.")
@click.option("--force", is_flag=True, help="Overwrite an existing --html file.")
@click.option("--no-calibrate", is_flag=True, help="On a CPU trace with no calibration yet, do not measure this "
                                                  "machine (the diff then has no roofline columns).")
def diff(a: str, b: str, chip_name: str | None, chip_b: str | None, top: int, as_json: bool, html_path: str | None,
         force: bool, no_calibrate: bool) -> None:
    """What changed from run A to run B (two batch sizes, two chips, two commits): step time, MFU,
    time and share of the step per category and per op, and the ops that appeared or disappeared.

    A and B are logdirs, run directories or trace files, or reports saved with
    `rooflens report --out FILE.json` (those keep the chip they were priced on).
    """
    from rooflens.analysis.diff import diff as diff_reports

    _check_outputs(force, ("--html", html_path))
    ra = _saved_report(a) or _load_report(a, chip_name=chip_name, no_calibrate=no_calibrate)
    rb = _saved_report(b) or _load_report(b, chip_name=chip_b or chip_name, no_calibrate=no_calibrate)
    d = diff_reports(ra, rb, a, b)
    if html_path:
        from rooflens.report.html import render_diff_html

        with _writing(html_path):
            Path(html_path).write_text(render_diff_html(d), encoding="utf-8")
        click.echo(f"rooflens: wrote {html_path}", err=True)
    if as_json:
        click.echo(_json_text(d.to_json()))
        return
    from rooflens.report.diff_view import render_diff

    render_diff(_console(), d, top=top)


@cli.command()
@click.argument("logdir", metavar="LOGDIR|RUN_DIR|TRACE_FILE")
@click.option("--budget", "budget_path", required=True, metavar="FILE",
              help="The budgets (TOML): max_recompiles, max_idle_fraction, min_mfu, max_step_time_s, [max_ratio], "
                   '[max_share], [program."NAME"].')
@click.option("--chip", "chip_name", help="Compare with this chip's roofline (default: inferred from the trace).")
@click.option("--json", "as_json", is_flag=True, help="Print every budget and its measured value as JSON.")
@click.option("--no-calibrate", is_flag=True, help="On a CPU trace with no calibration yet, do not measure this "
                                                  "machine (min_mfu and max_ratio then cannot be met).")
def check(logdir: str, budget_path: str, chip_name: str | None, as_json: bool, no_calibrate: bool) -> None:
    """Check a run against performance budgets (for CI): prints every budget with its measured value
    and exits 1 naming every violated one (2 for a budget file that cannot be used)."""
    from rooflens.analysis.budget import evaluate
    from rooflens.api import load_budget

    budget = load_budget(budget_path)  # a bad budget file fails before the trace is read
    rep = _load_report(logdir, chip_name=chip_name, no_calibrate=no_calibrate)
    result = evaluate(rep, budget)
    if as_json:
        click.echo(_json_text(result.to_json()))
    else:
        from rooflens.report.diff_view import render_check

        render_check(_console(), result, source=logdir)
    if not result.ok:
        click.echo(f"rooflens: {result.message()}", err=True)
        sys.exit(1)


@cli.command()
@click.argument("logdir", metavar="LOGDIR|RUN_DIR|TRACE_FILE")
@click.option("--parquet", "parquet_dir", required=True, metavar="DIR",
              help="Write DIR/ops.parquet: one row per op execution (columns: docs/export-schema.md).")
@click.option("--hlo", "hlo_dir", metavar="DIR", help="HLO text files of the programs (an XLA dump directory).")
@click.option("--force", is_flag=True, help="Replace an existing DIR/ops.parquet.")
def export(logdir: str, parquet_dir: str, hlo_dir: str | None, force: bool) -> None:
    """The op event table, for pandas / polars / DuckDB: one row per op execution, times in ps."""
    from rooflens.trace import load
    from rooflens.trace.export import EXPORT_FILE, write_parquet

    target = Path(parquet_dir)
    if target.exists() and not target.is_dir():
        raise UserError(f"{parquet_dir} is a file; --parquet takes a directory.")
    if (target / EXPORT_FILE).exists() and not force:
        raise UserError(f"{target / EXPORT_FILE} exists; give another --parquet directory or --force to replace it.")
    if target.is_dir():
        _check_writable(target / EXPORT_FILE, "--parquet", True)
    if hlo_dir:
        _need_dir(hlo_dir, "--hlo")
    prof = load(logdir, hlo_dir=hlo_dir)
    try:
        out = write_parquet(prof, target)
    except OSError as e:
        raise UserError(f"cannot write {target / EXPORT_FILE}: {e.strerror or e}.") from None
    click.echo(f"rooflens: wrote {out} ({len(prof.table):,} op events)", err=True)


@cli.command()
@click.argument("path", required=False, metavar="[LOGDIR|DUMP_DIR]")
@click.option("--estimate", "do_estimate", is_flag=True, help="Estimate the model state instead of reading a run.")
@click.option("--params", type=FiniteFloat(min=0, max=MAX_PARAMS, min_open=True), metavar="N",
              help="Parameter count for --estimate, e.g. 7e9.")
@click.option("--optimizer", default="adam", show_default=True, help="sgd, momentum, adam, adamw, lion, …")
@click.option("--param-dtype", default="bf16", show_default=True)
@click.option("--grad-dtype", default="bf16", show_default=True)
@click.option("--master-dtype", default="f32", show_default=True, help="'none' to train in the parameter dtype.")
@click.option("--shards", default=1, show_default=True, type=click.IntRange(min=1),
              help="Devices the state is split over (FSDP/ZeRO-3).")
@click.option("--chip", "chip_names", multiple=True, help="Check the fit on these chips (default: all).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def memory(path: str | None, do_estimate: bool, params: float | None, optimizer: str, param_dtype: str,
           grad_dtype: str, master_dtype: str, shards: int, chip_names: tuple[str, ...], as_json: bool) -> None:
    """Where the bytes go: a run's compiled peak and peak buffers, live snapshots; or the model-state estimate.

    rooflens memory LOGDIR · rooflens memory XLA_DUMP_DIR · rooflens memory --estimate --params 7e9 --chip h100-sxm
    """
    from rooflens import hardware as C
    from rooflens.report.memory_view import render_estimate, render_memory

    if do_estimate:
        from rooflens.memory import estimate

        if not params:
            raise UserError("--estimate needs --params N (a parameter count, e.g. 7e9).")
        for name in chip_names:
            C.chip(name)
        est = estimate(params, optimizer=optimizer, param_dtype=param_dtype, grad_dtype=grad_dtype,
                       master_dtype=None if master_dtype.lower() == "none" else master_dtype, shards=shards,
                       chips=chip_names or None)
        if as_json:
            click.echo(_json_text(est.to_dict()))
        else:
            render_estimate(_console(), est)
        return
    if not path:
        raise UserError("give a logdir (captured by rooflens), an XLA dump directory, or --estimate --params N.")
    p = Path(path)
    existing(path)
    if not p.is_dir() and not p.is_file():
        raise UserError(f"{path} is not a regular file (a device or a pipe); give a logdir or an XLA dump directory.")
    if p.is_dir() and list(p.glob("*buffer-assignment.txt")):
        from rooflens.memory import read_dump_memory

        mem = read_dump_memory(p)
    else:
        from rooflens.memory import read_run_memory
        from rooflens.trace import load

        mem = read_run_memory(load(path))
        if mem is None:
            raise UserError(f"{path} has no memory data: capture it with rl.capture (which saves XLA's buffer "
                            "assignment and device memory snapshots), or give an XLA dump directory.")
    if as_json:
        click.echo(_json_text(mem.to_dict()))
    else:
        render_memory(_console(), mem, source=path)


DEMO_DEVICES = 8


def _taken(d: Path) -> bool:
    """``d`` holds something (a file of that name, or a directory that is not empty)."""
    try:
        if not stat.S_ISDIR(d.stat().st_mode):
            return True
    except (FileNotFoundError, NotADirectoryError):
        return False  # free (or impossible: then creating it says why)
    except OSError:
        return True
    try:
        return any(d.iterdir())
    except OSError:
        return True


def _fresh_dir(base: Path, force: bool) -> Path:
    """``base``, or ``base-2``, ``base-3``… when it already holds anything (never overwrite unasked), checked
    writable before the demo runs."""
    if force and base.is_dir() or not _taken(base):
        out = base
    else:
        n = 2
        while _taken(base.parent / f"{base.name}-{n}") and n < 1000:
            n += 1
        out = base.parent / f"{base.name}-{n}"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the --out directory {out}: {(e.strerror or str(e)).lower()}.") from None
    for name in ("report.html", "report.json"):
        _check_writable(out / name, "--out", force, " (the demo's own files)")
    return out


@cli.command()
@click.option("--out", default="rooflens-demo", show_default=True, help="Directory for the report and the trace.")
@click.option("--force", is_flag=True, help="Write into --out even if it already holds files (replacing the demo's "
                                            "report.html, report.json and logs).")
@click.option("--steps", default=5, show_default=True, type=click.IntRange(min=1, max=10_000),
              help="Training steps in the trace window.")
def demo(out: str, force: bool, steps: int) -> None:
    """The whole loop on a built-in workload: a transformer training step on 8 virtual CPU devices
    (4×2 data × model mesh) → capture → analyze against this CPU → predict on TPU v5e → report.html."""
    if "jax" not in sys.modules:
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_force_host_platform_device_count" not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={DEMO_DEVICES}".strip()
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    outdir = _fresh_dir(Path(out), force)  # before the minutes of work: where it goes, and that it can
    console = _console()
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console,
                  transient=False) as progress:
        task = progress.add_task("starting JAX on 8 CPU devices", total=6)
        import jax
        import jax.numpy as jnp

        import rooflens as rl
        from rooflens.hardware import calibrate as K
        from rooflens.hardware import local_chip_path
        from rooflens.report.html import write_html
        from rooflens.workloads import TransformerConfig, make_mesh, sharded_train_step

        if len(jax.devices()) < DEMO_DEVICES:
            raise UserError(f"the demo needs {DEMO_DEVICES} devices but JAX sees {len(jax.devices())}; run it in a "
                            "fresh process (XLA_FLAGS must be set before JAX starts).")
        progress.advance(task)
        if not local_chip_path().is_file():
            progress.update(task, description="calibrating this CPU (once; saved as chip 'local')")
            K.save(K.measure(repeats=3, sizes=(256, 512, 1024), copy_bytes=64 << 20))
        progress.advance(task)
        progress.update(task, description="compiling and warming up the training step")
        step, (ap, at) = sharded_train_step(TransformerConfig(), make_mesh())
        params = jax.tree.map(lambda s: jax.device_put(jnp.zeros(s.shape, s.dtype), s.sharding), ap)
        tokens = jax.device_put(jnp.zeros(at.shape, at.dtype), at.sharding)
        progress.advance(task)
        progress.update(task, description=f"capturing {steps} steps")
        prof = rl.capture(step, params, tokens, steps=steps, logdir=outdir / "logs",
                          feed=lambda o, a: (o[0], a[1]))
        progress.advance(task)
        progress.update(task, description="comparing with the roofline of this CPU")
        rep = rl.analyze(prof)
        progress.advance(task)
        progress.update(task, description="predicting the same step on tpu-v5e")
        pred = rl.predict(step, ap, at, chip="tpu-v5e")
        with _writing(outdir):
            write_html(rep, outdir / "report.html", prediction=pred, title="rooflens demo: a transformer step")
            (outdir / "report.json").write_text(_json_text(rep.to_json()))
        progress.advance(task)
        progress.update(task, description="done")
    from rooflens.report.trace_view import render_op_stats, render_report

    render_op_stats(console, rep, source=", ".join(rep.sources), top=10)
    render_report(console, rep, source="", top=10)
    console.print(f"\n[bold]On tpu-v5e[/bold] the same step would take {pred.time_s * 1e6:.3g} µs per device "
                  f"(roofline; {pred.source}).")
    console.print(f"\n[bold]Report:[/bold] {outdir / 'report.html'}  (open it in a browser; the trace is in "
                  f"{outdir / 'logs'}, readable by TensorBoard and `rooflens report`)")


def _say(line: str) -> None:
    """One line on stderr, with any control character from a file name or from data escaped."""
    from rooflens.report.text import escape_controls

    click.echo(escape_controls(line), err=True)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors become one sentence on stderr and exit status 2."""
    try:
        cli.main(args=argv, prog_name="rooflens", standalone_mode=False)
    except RooflensError as e:
        _say(f"rooflens: {e}")
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("rooflens: interrupted.", err=True)
        sys.exit(130)
    except click.UsageError as e:  # a bad option or argument: one line too, with where to look
        where = f" (see '{e.ctx.command_path} -h')" if e.ctx is not None else ""
        _say(f"rooflens: {e.format_message().rstrip('.')}{where}.")
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("rooflens: interrupted.", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as e:  # a file the system refused (permissions, a full disk): the user's to fix, not a bug
        if e.filename is None or os.environ.get("ROOFLENS_DEBUG"):
            raise
        _say(f"rooflens: cannot use {e.filename}: {(e.strerror or str(e)).lower()}.")
        sys.exit(2)
    except Exception as e:  # a bug of ours: still one sentence, the traceback on request
        if os.environ.get("ROOFLENS_DEBUG"):
            raise
        _say(f"rooflens: internal error ({type(e).__name__}: {e}); set ROOFLENS_DEBUG=1 for the traceback.")
        sys.exit(1)


from rooflens.cli_capture import capture as _capture_verb  # noqa: E402 (the verb lives in its own module)

cli.add_command(_capture_verb)

if __name__ == "__main__":
    main()
