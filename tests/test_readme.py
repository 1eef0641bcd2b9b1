"""Every example of the README, run verbatim, in README order, in a fresh directory.

A reader follows the README from top to bottom in an empty directory: each ``rooflens …`` command of a
shell block is run as written (through a ``rooflens`` on PATH that is this checkout), and each Python block
as a script (with ``import rooflens as rl`` first when the block uses ``rl`` without importing it, as the
README's later blocks assume the first one's import). What an example cannot have in a fresh directory is
the reader's own input (their script, their HLO file, their logdir before any example made one, a job
listening on a port, a bucket): those examples are skipped, and only for a name listed in READER_INPUTS, so
an example that points at a file nothing makes fails here instead of being skipped quietly. Each example
that runs must exit 0 with no traceback, and write its numbers as people do (no Python exponent ``e+``,
``None`` or ``(s)``; a cited source's own ``4.5e10`` stays).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

# What only the reader has. Paths and hosts (skipped when absent from the directory at that point) ...
READER_INPUTS = ("module.txt", "model.py", "train.py", "your_script.py", "dump", "logs", "host:", "host0",
                 "gs://", "my_model.toml", "perf-logs", "nsys_report", "rooflens.toml", "out/")
# ... and the Python names a block uses for the reader's own function, arrays or text.
READER_NAMES = {"text", "fn", "w", "step", "params", "batch", "data", "train_step", "state", "prof"}
# Shell lines that are not rooflens commands: installing the package (network, minutes), other tools.
NOT_ROOFLENS = ("python3 -m venv", "XLA_FLAGS=", "nsys ", "tensorboard ", "- run:", "pip ")


def blocks() -> list[tuple[str, str]]:
    """The README's fenced code blocks, in order: (language, text)."""
    return re.findall(r"```(\w*)\n(.*?)```", README.read_text(), re.S)


def shell_commands(text: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments dropped; in a block that shows a
    session (``$ cmd`` then its output), the ``$`` lines only."""
    lines = text.replace("\\\n", " ").splitlines()
    if any(line.startswith("$ ") for line in lines):
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    out = []
    for line in lines:
        cmd = re.sub(r"\s+#.*$", "", line).strip()
        if cmd and not cmd.startswith("#"):
            out.append(cmd)
    return out


def needs_reader_input(cmd: str, cwd: Path) -> str | None:
    """The reader's input a command names and this directory lacks, or None."""
    for token in shlex.split(cmd):
        for value in (token, token.split("=", 1)[-1], token.split(":", 1)[0]):
            if any(value == r.rstrip("/") or value.startswith(r) for r in READER_INPUTS) \
                    and not (cwd / value).exists():
                return value
    return None


def clean(out: str) -> list[str]:
    """What a person should never read in an output: an exponent, a None, a "(s)" plural, a traceback."""
    bad = []
    for line in out.splitlines():
        if re.search(r"\d[eE][+]\d", line) or re.search(r"\bNone\b", line) or "(s)" in line or \
                "Traceback (most recent call last)" in line:
            bad.append(line)
    return bad


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    """A fresh directory and an environment as a reader's shell has it: no XLA_FLAGS, ``rooflens`` on PATH."""
    home = tmp_path_factory.mktemp("readme reader")  # a path with a space, as a user's may be
    bin_dir = home / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "rooflens"
    shim.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m rooflens.cli \"$@\"\n")
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "COLUMNS")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["ROOFLENS_CACHE_DIR"] = str(home / "cache")  # the reader's own cache: `rooflens calibrate` writes it
    work = home / "work"
    work.mkdir()
    return work, env


def test_every_readme_example_runs_verbatim(reader):
    cwd, env = reader
    ran, skipped, failures = [], [], []
    for lang, text in blocks():
        if lang in ("toml", "yaml"):
            continue  # files shown, not run (the check example names rooflens.toml, which the reader writes)
        if lang == "python":
            if re.search(r"""["']logs["']""", text) and not (cwd / "logs").exists():
                skipped.append((text.splitlines()[0], "logs"))  # reads the reader's logdir, before any example made one
                continue
            code = text if "import rooflens" in text or "rl." not in text else "import rooflens as rl\n" + text
            r = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                               timeout=600)
            missing = re.search(r"NameError: name '(\w+)' is not defined", r.stderr)
            if r.returncode and missing and missing.group(1) in READER_NAMES:
                skipped.append((text.splitlines()[0], missing.group(1)))
                continue
            ran.append(text.splitlines()[0])
            if r.returncode:
                failures.append(f"python block {text.splitlines()[0]!r}: {r.stderr[-1500:]}")
            continue
        for cmd in shell_commands(text):
            if cmd.startswith(NOT_ROOFLENS) or not cmd.startswith("rooflens"):
                skipped.append((cmd, "not a rooflens command"))
                continue
            lacking = needs_reader_input(cmd, cwd)
            if lacking:
                skipped.append((cmd, lacking))
                continue
            r = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
            ran.append(cmd)
            if r.returncode:
                failures.append(f"{cmd}: exit {r.returncode}: {r.stderr[-1500:]}")
            elif clean(r.stdout):
                failures.append(f"{cmd}: {clean(r.stdout)[:5]}")
    assert not failures, "\n\n".join(failures)
    # the examples a fresh directory can run did run: the catalogue, planning, memory, and the diff walk-through
    # `rooflens calibrate` (the README's own line, before the diff example) saves the chip 'local' that the
    # example's rl.analyze of a CPU trace needs: run in README order, the examples depend on each other
    for must in ("rooflens chips", "rooflens chips tpu-v5e", "rooflens calibrate",
                 "rooflens diff logs/b64 logs/b4096",
                 "rooflens memory --estimate --params 7e9 --optimizer adam --chip h100-sxm"):
        assert must in ran, (must, ran)
    assert any(r.startswith("import os") for r in ran)  # the diff example, which sets its own 8 devices
    assert (cwd / "logs" / "b64").is_dir() and (cwd / "logs" / "b4096").is_dir()
