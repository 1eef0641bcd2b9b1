"""``rooflens predict``: a JAX function (or an HLO file) op by op on a chip you may not have."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import click

from rooflens.cli.common import UserError, chip_files, emit, force_cpu_devices, need_file, parse_hlo_file


def load_function(target: str):
    import importlib.util

    path, colon, name = target.rpartition(":")
    if not colon or not path or not name:
        raise UserError(f"give the function as FILE.py:NAME, not {target!r}.")
    p = Path(path)
    need_file(path, "", "a Python file")
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
def stdout_to_stderr():
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


def mesh_devices(mesh: str | None) -> int:
    from rooflens.lowering import parse_mesh_spec

    if not mesh:
        return 0
    n = 1
    for v in parse_mesh_spec(mesh).values():
        n *= v
    return n


@click.command()
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
    from rooflens.report.cost_view import render_prediction

    pred = prediction(target, chip_name, arg_specs, mesh, topology, chips_file, quiet=as_json)
    emit(pred.to_dict, as_json, lambda c: render_prediction(c, pred, top=top, explain=explain))


def prediction(target: str, chip_name: str, arg_specs=(), mesh: str | None = None, topology: str | None = None,
               chips_file=(), quiet: bool = False):
    """The Prediction ``rooflens predict`` shows (also the MCP tool's). ``quiet``: what the user's module
    prints (on import, or while it is traced) goes to stderr, so stdout holds one JSON document."""
    from rooflens import hardware as C

    files = chip_files(tuple(chips_file))
    chip = C.chip(chip_name, files)  # unknown chips fail before JAX starts
    if not target.endswith(".py") and ":" not in target.replace("\\", "/").rsplit("/", 1)[-1]:
        if arg_specs or mesh:
            raise UserError("--arg and --mesh are for FILE.py:FUNCTION; an HLO file already has its shapes.")
        from rooflens.cost import predict_module

        module = parse_hlo_file(target)
        return predict_module(module, chip, source=f"the HLO in {target}, as written", topology=topology)
    need = mesh_devices(mesh)
    if need:
        force_cpu_devices(need, platform_cpu=chip.name != C.LOCAL_CHIP)
    from rooflens.lowering import make_mesh, parse_arg_spec
    from rooflens.lowering import predict as run_predict

    mesh_obj = make_mesh(mesh) if mesh else None
    args = [parse_arg_spec(a, mesh_obj) for a in arg_specs]
    with stdout_to_stderr() if quiet else contextlib.nullcontext():
        fn = load_function(target)
        return run_predict(fn, *args, chip=chip, mesh=mesh_obj, topology=topology)
