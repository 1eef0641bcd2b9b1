"""What every verb shares: one-sentence errors, the console, ``emit`` (JSON or a rendered view), file
and output checks, and reading an HLO file with its "did you mean" hint."""

from __future__ import annotations

import contextlib
import gzip
import math
import os
import stat
import sys
import tempfile
from collections.abc import Callable
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

    def _describe_range(self) -> str:
        """The range as ``--help`` shows it: nothing when unbounded (click would print ``x<=None``)."""
        if self.min is None and self.max is None:
            return ""
        lo = "" if self.min is None else f"{_typed(self.min)}{'<' if self.min_open else '<='}"
        hi = "" if self.max is None else f"{'<' if self.max_open else '<='}{_typed(self.max)}"
        return f"{lo}x{hi}"

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def _typed(v: float) -> str:
    """A bound as a user would type it: ``1e15``, not ``1000000000000000.0``; ``0``, not ``0.0``."""
    if float(v).is_integer():
        return f"{v:.0e}".replace("e+", "e") if abs(v) >= 1e6 else str(int(v))
    return repr(v)


def console():
    from rooflens.report.text import terminal_console

    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "160"))
    return terminal_console(highlight=False, soft_wrap=True, width=width)


def err_console():
    """A console on stderr, for progress and notes (stdout carries the result): its width as :func:`console`."""
    from rooflens.report.text import terminal_console

    width = None if sys.stderr.isatty() else int(os.environ.get("COLUMNS", "160"))
    return terminal_console(highlight=False, soft_wrap=True, width=width, stderr=True)


def json_text(doc) -> str:
    """The JSON rooflens prints or writes (indented; see :func:`rooflens.report.text.json_text`)."""
    from rooflens.report.text import json_text as render_json

    return render_json(doc)


def emit(doc: Callable[[], object], as_json: bool, render: Callable) -> None:
    """Print one result: ``doc()`` as JSON with ``--json``, else ``render(console)`` (a rich view)."""
    if as_json:
        click.echo(json_text(doc()))
    else:
        render(console())


def say(line: str) -> None:
    """One line on stderr, with any control character from a file name or from data escaped."""
    from rooflens.report.text import escape_controls

    click.echo(escape_controls(line), err=True)


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


def parse_hlo_file(path: str):
    """An HLO file read and parsed, or one sentence with the line and column where it stops being HLO."""
    from rooflens import hlo as H

    text = read_hlo_file(path)
    try:
        return H.parse(text)
    except H.HloParseError as e:
        raise UserError(f"{path} is not HLO text: line {e.line}, column {e.column}: {e.message}.") from None


def no_such_op(module, op_name: str, path: str) -> UserError:
    """"There is no instruction named …", with the closest names the module has."""
    from rooflens.hlo.explain import suggest_names

    close = suggest_names(module, op_name)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    return UserError(f"there is no instruction named {op_name!r} in {path}.{hint}")


def need_file(path: str, what: str, wanted: str) -> None:
    """One sentence when ``path`` is not a readable file: missing, a directory, or out of reach."""
    p = Path(path)
    existing(path, what)
    if p.is_dir():
        raise UserError(f"{what}{path} is a directory; give {wanted}.")
    if not p.is_file():
        raise UserError(f"{what}{path} is not a regular file; give {wanted}.")


def need_dir(path: str, option: str) -> None:
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


def chip_files(chips_file: tuple[str, ...]) -> tuple[str, ...]:
    for f in chips_file:
        need_file(f, "chip file ", "a TOML file of chips")
    return chips_file


def check_outputs(force: bool, *targets: tuple[str, str | None]) -> None:
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
        check_writable(Path(target), option, force)


def check_writable(p: Path, option: str, force: bool, replace_hint: str = "") -> None:
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
def writing(path) -> object:
    """Turn a failed write (a full disk, a vanished directory) into one sentence."""
    try:
        yield
    except OSError as e:
        raise UserError(f"cannot write {path}: {(e.strerror or str(e)).lower()}.") from None


def force_cpu_devices(count: int, platform_cpu: bool = True) -> None:
    """Before JAX starts: ``count`` virtual CPU devices (unless the user's XLA_FLAGS already say how
    many), and the CPU platform. Once JAX runs it is too late, and nothing is changed."""
    if "jax" in sys.modules:
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()
    if platform_cpu:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")


def calibrate_first_use() -> None:
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
            path, cal = calibrate_once(progress=lambda done, total: progress.update(task, completed=done))
        except Exception as e:  # no roofline then; the report says how to get one
            progress.update(task, description=f"rooflens: calibration failed ({type(e).__name__}: {e})")
            return
    click.echo(f"rooflens: calibration saved to {path}", err=True)
    if cal.busy:
        from rooflens.hardware.calibrate import spread_words

        click.echo(f"rooflens: warning: the machine was busy while it was calibrated "
                   f"({spread_words(cal.spread, up_to=True)}): run `rooflens calibrate` when it is quiet.", err=True)


def load_report(paths, hlo_dir: str | None = None, chip_name: str | None = None, include_warmup: bool = False,
                no_calibrate: bool = False, workers: int = 1, engine: str = "local", ray_address: str | None = None,
                merge: str = "auto", step_fn: str | None = None):
    """:func:`rooflens.api.load_report`, calibrating a CPU first (once) unless told not to."""
    from rooflens.api import load_report as api_load_report

    def calibrate(prof) -> None:  # a run that recorded its calibration is priced with that one
        if chip_name is None and prof.platform == "cpu" and not no_calibrate and not prof.manifest.calibration:
            calibrate_first_use()

    return api_load_report(paths, hlo_dir, chip_name, include_warmup, calibrate, workers=workers, engine=engine,
                           ray_address=ray_address, merge=merge, step_fn=step_fn)
