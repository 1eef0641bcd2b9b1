"""The MCP server: rooflens's verbs as tools over stdio (``rooflens mcp``), on the official SDK.

Plumbing only. The work runs in child processes, in the server's working directory (paths are read as
given): ``python -m rooflens.cli run`` for ``run``; ``python -m rooflens.mcp.child`` for predict, plan,
hlo and chips, one process per call; one serving ``python -m rooflens.mcp.child --serve`` for report,
op, diff and check, which keeps the runs it analysed (:class:`Warm`). So a user's module or a trace
reader never writes on the protocol's stdout, and a timeout or a cancelled request ends the call's whole
process group. While a call runs, the client gets progress notifications (seconds elapsed of the
timeout, with the child's latest stderr line). Bad input comes back as a tool error (``is_error``)
whose text is the sentence the command line prints; the server stays up for the next call.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

import rooflens
from rooflens.mcp.summary import DEFAULT_MAX_BYTES, DEFAULT_TOP

TIMEOUT_S = 300.0  # an analysis call's default limit
RUN_TIMEOUT_S = 900.0  # a profiled run's default limit
PROGRESS_EVERY_S = 2.0  # a progress notification at least this often while a call runs
PROGRESS_MIN_GAP_S = 0.5  # and never more often than this
TAIL_LINES = 40  # of a child's stderr kept (the error sentence, run's tail)
TAIL_CHARS = 4000  # of a run's stdout and stderr returned
KILL_GRACE_S = 2.0  # between SIGTERM and SIGKILL for a call past its time

INSTRUCTIONS = """rooflens prices every op of a compiled JAX program on a named chip (its roofline) and \
compares it with a profiler trace. The loop: run(script, steps="A:B") profiles a window of steps; \
report(path) gives the findings ranked by recoverable_s (seconds per step a fix gives back) and the \
costliest ops measured against their roofline; op(path, name, program) explains one op (its \
arithmetic, HLO line and Python source); predict(source, chip, args) prices a change on this chip or \
another; run again, diff(a, b) the two profiles, and check(path, budget) against a budget. Every time \
is in seconds and every size in bytes (field names end in _s, _bytes, _per_s). docs/agents.md is the guide."""

Path_ = Annotated[str, Field(description="A path as the user gives it (relative to the server's working directory).")]
Chip = Annotated[str | None, Field(description="A catalogue chip (see chips()), e.g. tpu-v5e, h100-sxm; default: "
                                               "inferred from the trace (a CPU trace: the calibrated 'local').")]
Top = Annotated[int, Field(ge=0, le=500, description="Rows per list on one page (findings, ops).")]
Offset = Annotated[int, Field(ge=0, description="The first row of the page (paging: offset += top).")]
MaxBytes = Annotated[int, Field(ge=8000, description="The most the result's JSON may take, in bytes (8000 or more).")]
Timeout = Annotated[float, Field(gt=0, description="Seconds before the call is stopped (its processes killed).")]


def _tail(text: str) -> str:
    return text if len(text) <= TAIL_CHARS else "…" + text[-TAIL_CHARS:]


def _error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _result(doc: Any) -> CallToolResult:
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    structured = doc if isinstance(doc, dict) else {"result": doc}
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


def _sentence(rc: int, err_lines: collections.deque, what: str) -> str:
    """The one sentence a failed call ends with (``rooflens: …``, as the command line prints it)."""
    for line in reversed(err_lines):
        if line.startswith("rooflens: "):
            return line
    last = next((line for line in reversed(err_lines) if line.strip()), "")
    return f"rooflens: {what} ended with exit status {rc}" + (f" ({last.strip()})." if last else ".")


def _child_env(analysis: bool) -> dict[str, str]:
    """The server's environment, with this rooflens first on the path (the child runs the same code). An
    analysis child writes no bytecode beside a user's module it imports (predict's FILE.py): it writes only
    in the user cache."""
    env = dict(os.environ)
    src = str(Path(rooflens.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("PYTHONUNBUFFERED", "1")
    if analysis:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pid, sig)


class Progress:
    """Progress notifications for one call: seconds elapsed of its timeout, with a message; never more often
    than every PROGRESS_MIN_GAP_S, and always increasing (as MCP asks)."""

    def __init__(self, ctx: Context, timeout_s: float, label: str) -> None:
        self.ctx, self.timeout_s, self.label = ctx, timeout_s, label
        self.start = time.monotonic()
        self.sent_s = -1.0

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.start

    async def say(self, message: str) -> None:
        now = self.elapsed_s
        if now - self.sent_s < PROGRESS_MIN_GAP_S:
            return
        self.sent_s = now
        with contextlib.suppress(Exception):  # a client gone away: the call's own result says what matters
            await self.ctx.report_progress(round(now, 3), self.timeout_s, f"{self.label}: {message}"[:300])

    async def beat(self) -> None:
        """A notification at least every PROGRESS_EVERY_S while the work says nothing (run in a task)."""
        while True:
            await anyio.sleep(PROGRESS_EVERY_S)
            await self.say(f"{self.elapsed_s:.0f} s of at most {self.timeout_s:.0f} s")


class Lines:
    """A stream's text cut into lines as it arrives (``\r`` too: progress bars redraw with it); the last
    TAIL_LINES kept."""

    def __init__(self) -> None:
        self.pending = b""
        self.kept: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)

    def feed(self, chunk: bytes) -> list[str]:
        self.pending += chunk
        *whole, self.pending = self.pending.replace(b"\r", b"\n").split(b"\n")
        lines = [raw.decode("utf-8", "replace") for raw in whole if raw.strip()]
        self.kept.extend(lines)
        return lines

    def close(self) -> None:
        if self.pending.strip():
            self.kept.append(self.pending.decode("utf-8", "replace"))
        self.pending = b""


async def _forward(stream, lines: Lines, progress: Progress) -> None:
    """A child's stderr, line by line, as progress messages (run in a task)."""
    async for chunk in stream:
        for line in lines.feed(chunk):
            await progress.say(line.strip())
    lines.close()


async def _open(argv: list[str], analysis: bool):
    return await anyio.open_process(argv, stdin=-1, stdout=-1, stderr=-1, env=_child_env(analysis),
                                    start_new_session=True)


async def _end(proc) -> None:
    """The child and its whole process group ended (SIGTERM, then SIGKILL), whatever else is cancelled."""
    with anyio.CancelScope(shield=True):
        if proc.returncode is None:
            _kill_group(proc.pid, signal.SIGTERM)
            with anyio.move_on_after(KILL_GRACE_S):
                await proc.wait()
            if proc.returncode is None:
                _kill_group(proc.pid, signal.SIGKILL)
                await proc.wait()
        _kill_group(proc.pid, signal.SIGKILL)  # what it left running in its group (a worker pool)


class Outcome:
    """A finished child: its exit status, stdout, stderr's last lines, and whether it ran out of time."""

    def __init__(self) -> None:
        self.returncode: int | None = None
        self.stdout = bytearray()
        self.stderr = Lines()
        self.timed_out = False
        self.elapsed_s = 0.0


async def _spawn(ctx: Context, argv: list[str], stdin: bytes, timeout_s: float, label: str,
                 script: bool = False) -> Outcome:
    """Run ``argv`` in its own process group, feeding ``stdin``; progress to the client meanwhile; the
    whole group killed past ``timeout_s`` or when the request is cancelled. A ``script`` (``run``): its
    stdout is progress too, and only its tail is kept."""
    out = Outcome()
    progress = Progress(ctx, timeout_s, label)
    printed = Lines()
    proc = await _open(argv, analysis=not script)
    try:
        async def feed() -> None:
            async with proc.stdin:
                await proc.stdin.send(stdin)

        with anyio.move_on_after(timeout_s) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(feed)
                tg.start_soon(progress.beat)
                tg.start_soon(_forward, proc.stderr, out.stderr, progress)
                async for chunk in proc.stdout:
                    out.stdout += chunk
                    if script:
                        del out.stdout[:-TAIL_CHARS * 4]
                        for line in printed.feed(chunk):
                            await progress.say(line.strip())
                await proc.wait()
                tg.cancel_scope.cancel()
        out.timed_out = scope.cancelled_caught
    finally:
        await _end(proc)
        out.returncode = proc.returncode
    out.elapsed_s = progress.elapsed_s
    return out


def _timed_out(tool: str, timeout_s: float) -> CallToolResult:
    return _error(f"rooflens: {tool} did not finish in {timeout_s:g} s and was stopped; give a larger timeout_s.")


async def _call(ctx: Context, tool: str, args: dict, timeout_s: float) -> CallToolResult:
    """One tool in a child process of its own: its JSON document, or its one sentence as a tool error."""
    request = json.dumps({"tool": tool, "args": args}).encode()
    out = await _spawn(ctx, [sys.executable, "-m", "rooflens.mcp.child"], request, timeout_s, tool)
    if out.timed_out:
        return _timed_out(tool, timeout_s)
    if out.returncode != 0:
        return _error(_sentence(out.returncode, out.stderr.kept, f"the {tool} call"))
    return _result(json.loads(out.stdout))


class Warm:
    """The serving child (``python -m rooflens.mcp.child --serve``) that answers the tools on runs (report,
    op, diff, check) one call at a time, keeping the reports it made: ``op`` after ``report`` on a trace does
    not read and analyse it again. Past a call's timeout, or when its request is cancelled, the child is
    ended with all it kept, and the next call starts a new one."""

    TOOLS = ("report", "op", "diff", "check")

    def __init__(self) -> None:
        self.proc = None
        self.ended: int | None = None  # the exit status of the last child ended
        self.lock = anyio.Lock()
        self.stdout = bytearray()
        self.stderr = Lines()

    async def call(self, ctx: Context, tool: str, args: dict, timeout_s: float) -> CallToolResult:
        request = json.dumps({"tool": tool, "args": args}).encode() + b"\n"
        progress = Progress(ctx, timeout_s, tool)
        reply = None
        with anyio.move_on_after(timeout_s) as scope:
            async with self.lock:  # parallel calls wait their turn (inside their own timeouts)
                try:
                    reply = await self._exchange(request, progress)
                except BaseException:  # past its time, or cancelled: mid-answer, so it cannot be reused
                    await self.stop()
                    raise
        if scope.cancelled_caught:
            return _timed_out(tool, timeout_s)
        if reply is None:  # the child died (killed from outside, out of memory): its last words
            return _error(_sentence(self.returncode, self.stderr.kept, f"the {tool} call"))
        if reply["status"] != 0:
            return _error(reply["sentence"])
        return _result(reply["doc"])

    async def _exchange(self, request: bytes, progress: Progress) -> dict | None:
        if self.proc is None or self.proc.returncode is not None:
            await self.stop()
            self.proc = await _open([sys.executable, "-m", "rooflens.mcp.child", "--serve"], analysis=True)
        self.stderr = Lines()
        await self.proc.stdin.send(request)
        async with anyio.create_task_group() as tg:
            tg.start_soon(progress.beat)
            tg.start_soon(_forward, self.proc.stderr, self.stderr, progress)
            while b"\n" not in self.stdout:
                try:
                    self.stdout += await self.proc.stdout.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
            tg.cancel_scope.cancel()
        if b"\n" not in self.stdout:
            with anyio.move_on_after(KILL_GRACE_S):  # its last stderr lines say why
                async for chunk in self.proc.stderr:
                    self.stderr.feed(chunk)
            self.stderr.close()
            await self.stop()
            return None
        line, _, rest = bytes(self.stdout).partition(b"\n")
        self.stdout = bytearray(rest)
        return json.loads(line)

    @property
    def returncode(self) -> int:
        return self.ended if self.ended is not None else 1

    async def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            await _end(proc)
            self.ended = proc.returncode
        self.stdout = bytearray()


def _profiles(logdir: Path) -> set[str]:
    """The run directories under a logdir (``plugins/profile/<run>``)."""
    root = logdir / "plugins" / "profile"
    try:
        return {str(p) for p in root.iterdir() if p.is_dir()}
    except OSError:
        return set()


def _default_logdir(script: str) -> Path:
    """Where a run that names no logdir goes: the user cache, never the working directory."""
    from rooflens.userdirs import cache_dir

    stamp = time.strftime("%Y%m%d-%H%M%S")
    return cache_dir() / "mcp-runs" / f"{Path(script).stem or 'run'}-{stamp}-{os.getpid()}"


def build() -> MCPServer:
    """The server with its tools (``rooflens mcp`` runs it over stdio)."""
    app = MCPServer("rooflens", instructions=INSTRUCTIONS, version=_version(), log_level="WARNING")
    warm = Warm()

    @app.tool()
    async def report(ctx: Context, path: Annotated[str | list[str], Field(description=(
                         "A logdir, run directory or trace file (*.xplane.pb, *.trace.json.gz, nsys *.sqlite / "
                         "*.zip), or a list of them (the hosts of one run)."))],
                     chip: Chip = None,
                     hlo: Annotated[str | None, Field(description="An XLA dump directory with the programs' HLO, "
                                                                  "for traces captured without rooflens.")] = None,
                     top: Top = DEFAULT_TOP, offset: Offset = 0,
                     full: Annotated[bool, Field(description="The whole report (docs/report-schema.md), "
                                                             "unbounded.")] = False,
                     include_warmup: bool = False, max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
                     timeout_s: Timeout = TIMEOUT_S) -> CallToolResult:
        """What ran against its roofline: the chip and why, the steps, findings ranked by recoverable_s (what a
        fix gives back per step), and the costliest ops measured vs roofline. A page of the report's JSON
        (schema_version as in docs/report-schema.md): lists cut to `top` rows from `offset`, under
        `max_bytes`; `page` says what was left out."""
        return await warm.call(ctx, "report", {"path": path, "chip": chip, "hlo": hlo, "top": top, "offset": offset,
                                           "full": full, "include_warmup": include_warmup,
                                           "max_bytes": max_bytes}, timeout_s)

    @app.tool()
    async def op(ctx: Context, path: Annotated[str | list[str], Field(description="The trace, as for report.")],
                 name: Annotated[str, Field(description="The HLO instruction name, e.g. fusion.3 (a finding's "
                                                        "ops, or report's comparison rows, give them).")],
                 program: Annotated[str | None, Field(description="Its program, e.g. jit_train_step (default: "
                                                                  "the one where it took most time).")] = None,
                 chip: Chip = None, hlo: str | None = None, timeout_s: Timeout = TIMEOUT_S) -> CallToolResult:
        """One op explained: its measurement (per execution of its program, and its spread), its roofline with
        the arithmetic (FLOPs, bytes, T_math / T_mem / T_comm, the bound), its HLO line in plain words, the
        Python source that made it, and the findings that name it."""
        return await warm.call(ctx, "op", {"path": path, "name": name, "program": program, "chip": chip, "hlo": hlo},
                           timeout_s)

    @app.tool()
    async def predict(ctx: Context,
                      source: Annotated[str, Field(description="FILE.py:FUNCTION (lowered with args), or an HLO "
                                                               "text file priced as written.")],
                      chip: Annotated[str, Field(description="A catalogue chip (see chips()) or 'local'.")],
                      args: Annotated[list[str], Field(description=(
                          "One spec per positional argument, dtype[dims], e.g. 'bf16[32,1024,8192]'; shard dims "
                          "over mesh axes with '@data,_,_'. Empty for an HLO file."))] = [],  # noqa: B006
                      mesh: Annotated[str | None, Field(description="Device mesh, e.g. data=4,model=2.")] = None,
                      topology: Annotated[str | None, Field(description="TPU slice shape, e.g. 4x4.")] = None,
                      top: Top = DEFAULT_TOP, max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
                      timeout_s: Timeout = TIMEOUT_S) -> CallToolResult:
        """A JAX function's (or an HLO file's) time op by op on a chip you may not have: time_s per device, by
        category and bound, and the costliest ops with their arithmetic (`rooflens predict`)."""
        return await _call(ctx, "predict", {"source": source, "chip": chip, "args": list(args), "mesh": mesh,
                                            "topology": topology, "top": top, "max_bytes": max_bytes}, timeout_s)

    @app.tool()
    async def plan(ctx: Context,
                   model: Annotated[str | None, Field(description="A preset: llama2-7b/13b/70b, llama3-8b/70b/405b, "
                                                                  "mistral-7b, mixtral-8x7b, rooflens-demo.")] = None,
                   config: Annotated[str | None, Field(description="A custom Transformer's TOML file.")] = None,
                   chip: str | None = None, chips: Annotated[int | None, Field(ge=1)] = None,
                   batch_tokens: Annotated[float | None, Field(gt=0, description="Tokens per training step.")] = None,
                   mfu: Annotated[float | None, Field(gt=0, le=1)] = None,
                   tokens: Annotated[float | None, Field(gt=0, description="Tokens of the whole run.")] = None,
                   topology: str | None = None, seq_len: Annotated[int | None, Field(ge=1)] = None,
                   checkpoints: Annotated[str, Field(description="Activation checkpoints per layer: a count, or "
                                                                 "block, ffw, matmuls, none.")] = "1",
                   decode: bool = False, batch: Annotated[int | None, Field(ge=1)] = None,
                   context: Annotated[int | None, Field(ge=1)] = None, kv_dtype: str = "bf16",
                   param_dtype: str = "bf16", timeout_s: Timeout = TIMEOUT_S) -> CallToolResult:
        """A model's parameters, memory, sharding, step time and run time on `chips` chips, or its decode step,
        from first principles (`rooflens plan`)."""
        return await _call(ctx, "plan", {
            "model": model, "config": config, "chip": chip, "chips": chips, "batch_tokens": batch_tokens,
            "mfu": mfu, "tokens": tokens, "topology": topology, "seq_len": seq_len, "checkpoints": checkpoints,
            "decode": decode, "batch": batch, "context": context, "kv_dtype": kv_dtype,
            "param_dtype": param_dtype}, timeout_s)

    @app.tool()
    async def diff(ctx: Context, a: Annotated[str, Field(description="Run A: a logdir, trace, or a report saved "
                                                                     "with `rooflens report --out A.json`.")],
                   b: Annotated[str, Field(description="Run B, the same way.")], chip: Chip = None,
                   chip_b: Annotated[str | None, Field(description="B's chip when it differs from A's.")] = None,
                   top: Top = DEFAULT_TOP, offset: Offset = 0, max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
                   timeout_s: Timeout = TIMEOUT_S) -> CallToolResult:
        """What changed from A to B: step time and MFU, time and share per category and per matched op, the ops
        that appeared or disappeared (`rooflens diff`)."""
        return await warm.call(ctx, "diff", {"a": a, "b": b, "chip": chip, "chip_b": chip_b, "top": top,
                                         "offset": offset, "max_bytes": max_bytes}, timeout_s)

    @app.tool()
    async def check(ctx: Context, path: Path_,
                    budget: Annotated[str | dict[str, Any], Field(description=(
                        "A TOML budget file, or the same keys as an object: max_recompiles, max_idle_fraction, "
                        "min_mfu, max_step_time_s, max_recoverable_share, max_ratio {category: x}, max_share "
                        "{category: x}, max_recoverable_s {finding id: s}, program {NAME: {…}}."))],
                    chip: Chip = None, timeout_s: Timeout = TIMEOUT_S) -> CallToolResult:
        """A run against performance budgets: every budget with its measured value; `ok` false names the
        violated ones in `violated` and `message` (`rooflens check`)."""
        return await warm.call(ctx, "check", {"path": path, "budget": budget, "chip": chip}, timeout_s)

    @app.tool()
    async def hlo(ctx: Context, path: Annotated[str, Field(description="An HLO text file (a dump's "
                                                                       "*after_optimizations.txt, plain or .gz).")],
                  op: Annotated[str | None, Field(description="One instruction to explain.")] = None,
                  top: Top = DEFAULT_TOP, max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
                  timeout_s: Timeout = TIMEOUT_S) -> CallToolResult:
        """An HLO module read: ops by category, collectives, largest buffers, warnings; or one op in plain
        words (shape, layout, tiling, padding, operands, body, FLOPs, source) (`rooflens hlo`)."""
        return await _call(ctx, "hlo", {"path": path, "op": op, "top": top, "max_bytes": max_bytes}, timeout_s)

    @app.tool()
    async def chips(ctx: Context, name: Annotated[str | None, Field(description=(
            "One chip: every figure with its source."))] = None, timeout_s: Timeout = TIMEOUT_S) -> CallToolResult:
        """The chip catalogue (one entry = one JAX device): peak FLOP/s, HBM bytes and bytes/s, links; or one
        chip with the document and section behind every number."""
        return await _call(ctx, "chips", {"name": name}, timeout_s)

    @app.tool()
    async def run(ctx: Context, script: Annotated[str, Field(description="The Python script to profile, run "
                                                                         "exactly as `python script.py args`.")],
                  args: Annotated[list[str], Field(description="The script's own arguments.")] = [],  # noqa: B006
                  steps: Annotated[str | None, Field(description=(
                      "START:STOP: trace only executions START…STOP-1 of the step program (e.g. '5:8'); default: "
                      "the whole run."))] = None,
                  step_fn: Annotated[str | None, Field(description="The step function's name, when it is not the "
                                                                   "heaviest repeated one.")] = None,
                  logdir: Annotated[str | None, Field(description=(
                      "Where the profile goes (default: a new directory in the user cache)."))] = None,
                  timeout_s: Timeout = RUN_TIMEOUT_S) -> CallToolResult:
        """Profile an unmodified script (`rooflens run`): a window of its steps traced with the programs' HLO.
        Returns the script's exit status, where the profile is (give it to report), and the tail of its
        output. Progress notifications carry the script's output while it runs."""
        return await _run(ctx, script, list(args), steps, step_fn, logdir, timeout_s)

    return app


async def _run(ctx: Context, script: str, args: list[str], steps: str | None, step_fn: str | None,
               logdir: str | None, timeout_s: float) -> CallToolResult:
    where = Path(logdir) if logdir else _default_logdir(script)
    before = _profiles(where)
    argv = [sys.executable, "-m", "rooflens.cli", "run", "--logdir", str(where)]
    if steps is not None:
        argv += ["--steps", str(steps)]
    if step_fn is not None:
        argv += ["--step-fn", step_fn]
    argv += [script, *args]
    out = await _spawn(ctx, argv, b"", timeout_s, "run", script=True)
    made = sorted(_profiles(where) - before)
    stderr = "\n".join(out.stderr.kept)
    if out.timed_out:
        return _error(f"rooflens: run did not finish in {timeout_s:g} s and was stopped"
                      + (f"; what it wrote is in {where}" if made else "") + "; give a larger timeout_s or "
                      "fewer steps.")
    if not made:
        return _error(_sentence(out.returncode or 0, out.stderr.kept, "the script")
                      if out.returncode else f"rooflens: the run wrote no profile in {where}; its output ends: "
                      f"{_tail(stderr)[-500:]}")
    doc = {"exit_status": out.returncode, "logdir": str(where), "profiles": made, "elapsed_s": out.elapsed_s,
           "command": argv[3:], "stdout_tail": _tail(out.stdout.decode("utf-8", "replace")),
           "stderr_tail": _tail(stderr),
           "next": f"report(path={made[-1]!r}) reads the profile; op(path, name) explains one of its ops"}
    return _result(doc)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rooflens")
    except PackageNotFoundError:
        return ""


def serve() -> None:
    """Serve the tools over stdio until the client closes the connection."""
    build().run("stdio")
