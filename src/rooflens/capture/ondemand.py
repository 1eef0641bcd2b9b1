"""``rooflens capture HOST:PORT --duration S``: a profile of a running job, taken on demand.

A job that called ``jax.profiler.start_server(PORT)`` serves TSL's ``ProfilerService`` over gRPC,
the service TensorBoard's "capture profile" button calls. Its ``Profile`` RPC traces the job for
the requested time and writes the XSpace itself, on the job's own filesystem, to
``<repository_root>/<session_id>/<host_name>.xplane.pb`` (``ProfileRequest`` and
``ProfileOptions``: ``tsl/profiler/protobuf/profiler_service.proto`` and ``profiler_options.proto``
in openxla/xla). With ``repository_root = <logdir>/plugins/profile`` that is a run directory
``rooflens report`` reads; ``enable_hlo_proto`` makes the job put its programs' HLO in the trace's
metadata plane, so ops get their scopes and rooflines.

jaxlib 0.10 has the server but no client, so the client is grpcio (the ``capture`` extra); the two
messages are encoded here by hand (protobuf's wire format: varints and length-delimited fields).
Several hosts (``HOST1:PORT,HOST2:PORT``) are asked at the same time, one thread each; every host
needs the logdir on a filesystem it can write (a local path on one machine, a shared one or a
bucket for a multi-host job).
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rooflens.capture.window import wait_for_fresh_run_name
from rooflens.errors import RooflensError
from rooflens.trace.formats.protowire import bytes_field, varint, varint_field

PROFILE_METHOD = "/tensorflow.ProfilerService/Profile"
# ProfileOptions (profiler_options.proto): version 1 turns the levels below on; host TraceMe level 2
# (jax's default, program executions), device tracer on, no Python tracer (its cost is per call),
# and the HLO protos in the metadata plane.
OPTIONS_VERSION, HOST_TRACER_LEVEL, DEVICE_TRACER_LEVEL, PYTHON_TRACER_LEVEL = 1, 2, 1, 0
EARLY_END = 0.8  # a trace returned before this share of the capture's duration: the job ended meanwhile
GRACE_S = 30.0  # beyond the capture's own duration, how long a host may take to write its trace
STILL_SERVING_S = 1.0  # after a capture, how long a job is watched for having ended with it


def profile_request(duration_ms: int, repository_root: str, session_id: str, host_name: str) -> bytes:
    """A serialized ``tensorflow.ProfileRequest`` (field numbers from profiler_service.proto)."""
    opts = (varint_field(5, OPTIONS_VERSION) + varint_field(2, HOST_TRACER_LEVEL) + varint_field(3, DEVICE_TRACER_LEVEL)
            + varint_field(4, PYTHON_TRACER_LEVEL) + varint_field(7, 1)  # enable_hlo_proto
            + varint_field(9, duration_ms))  # the session's own duration_ms: the server traces this long
    return (varint_field(1, duration_ms) + bytes_field(4, opts) + bytes_field(5, repository_root.encode())
            + bytes_field(6, session_id.encode()) + bytes_field(7, host_name.encode()))


def empty_trace(response: bytes) -> bool:
    """``ProfileResponse.empty_trace`` (field 7, a bool) from the serialized response."""
    i = 0
    while i < len(response):
        key, i = varint(response, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(response, i)
            if number == 7:
                return bool(value)
        elif wire == 2:
            size, i = varint(response, i)
            i += size
        else:  # no other wire type in this message
            break
    return False


@dataclass(frozen=True)
class Target:
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def label(self) -> str:
        """The trace file's name: the host, and the port (two jobs may share a machine)."""
        return f"{re.sub(r'[^0-9A-Za-z_.-]', '_', self.host)}.port{self.port}"


def parse_targets(text: str) -> list[Target]:
    """``HOST:PORT[,HOST:PORT…]`` → targets; RooflensError for anything else."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise RooflensError(f"{part or text!r} is not HOST:PORT (the port the job gave "
                                "jax.profiler.start_server); give HOST:PORT or HOST1:PORT,HOST2:PORT.")
        out.append(Target(host.strip("[]"), int(port)))
    if len({t.address for t in out}) != len(out):
        raise RooflensError(f"{text}: the same HOST:PORT is given twice.")
    return out


def _ask(target: Target, request: bytes, duration_s: float, result: dict) -> None:
    import grpc

    t0 = time.monotonic()
    with grpc.insecure_channel(target.address) as channel:
        call = channel.unary_unary(PROFILE_METHOD, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        try:
            response = call(request, timeout=duration_s + GRACE_S)
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            result[target] = (code, time.monotonic() - t0, e.details() if hasattr(e, "details") else str(e))
            return
    elapsed_s = time.monotonic() - t0
    ended = elapsed_s < EARLY_END * duration_s or not _still_serving(target)  # watched in this host's thread
    result[target] = ("empty" if empty_trace(response) else "ended" if ended else "ok", elapsed_s, "")


def _still_serving(target: Target, watch_s: float = STILL_SERVING_S) -> bool:
    """Whether the job still listens on its port a moment after returning its trace. A Python job whose
    script ends during a capture lives on until the session is over, returns a trace that ends with it,
    then exits: a job that goes on running keeps its profiler server."""
    import socket

    end = time.monotonic() + watch_s
    while time.monotonic() < end:
        try:
            with socket.create_connection((target.host, target.port), timeout=0.5):
                pass
        except OSError:
            return False
        time.sleep(0.1)
    return True


def _problem(target: Target, outcome: tuple, duration_s: float) -> str:
    """One sentence for a host whose capture failed ("" when it worked)."""
    import grpc

    code, elapsed_s, details = outcome
    if code == "ended":
        return f"the job at {target.address} finished during the {duration_s:g} s capture, so its trace ends with it"
    if code == "ok":
        return ""
    if code == "empty":
        return f"the job at {target.address} recorded nothing during the {duration_s:g} s capture"
    if code == grpc.StatusCode.UNAVAILABLE and elapsed_s < min(1.0, duration_s / 2):
        return (f"nothing answers at {target.address} (is the job running, and did it call "
                f"jax.profiler.start_server({target.port})?)")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.INTERNAL):
        return f"the job at {target.address} stopped answering during the capture (it finished or died)"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"the job at {target.address} did not return its trace within {duration_s + GRACE_S:g} s"
    name = getattr(code, "name", str(code))
    return f"the job at {target.address} refused the capture ({name}: {details or 'no details'})"


def capture(addresses: str, duration_s: float, logdir: str | Path | None = None) -> tuple[Path, list[str]]:
    """Trace the running job(s) at ``addresses`` for ``duration_s`` seconds: (the run directory, one
    sentence per host that failed while others worked). RooflensError when no host gave a trace."""
    targets = parse_targets(addresses)
    if not duration_s or duration_s <= 0 or duration_s > 3600:
        raise RooflensError("--duration takes the seconds to trace, more than 0 and at most 3600.")
    try:
        import grpc  # noqa: F401
    except ImportError:
        raise RooflensError("rooflens capture needs grpcio to talk to the job's profiler server: "
                            "pip install 'rooflens[capture]'.") from None
    logdir = Path(logdir or "rooflens-logs").absolute()
    root = logdir / "plugins" / "profile"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RooflensError(f"cannot create the log directory {logdir} ({e.strerror or e}).") from None
    wait_for_fresh_run_name(logdir)
    run = time.strftime("%Y_%m_%d_%H_%M_%S")
    request_of = {t: profile_request(round(duration_s * 1000), str(root), run, t.label) for t in targets}
    result: dict = {}
    threads = [threading.Thread(target=_ask, args=(t, request_of[t], duration_s, result), daemon=True)
               for t in targets]
    t0_ns = time.time_ns()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    run_dir = root / run
    problems = [p for t in targets if (p := _problem(t, result[t], duration_s))]
    written = sorted(run_dir.glob("*.xplane.pb")) if run_dir.is_dir() else []
    if problems and not written:
        raise RooflensError("; ".join(problems) + ".")
    meta = {"captured_by": "rooflens capture", "when_unix_s": t0_ns / 1e9, "trace_start_unix_ns": t0_ns,
            "wall_s": (time.time_ns() - t0_ns) / 1e9, "warmup_in_window": False,
            "window": {"duration_s": duration_s, "delay_s": 0.0, "on_demand": True,
                       "hosts": [t.address for t in targets]},
            "notes": problems}
    (run_dir / "rooflens.json").write_text(json.dumps(meta, indent=1))
    if len(problems) == len(targets):  # no host gave the capture asked for: what they recorded is kept
        raise RooflensError("; ".join(problems) + f" (what was recorded is kept in {run_dir}).")
    return run_dir, problems
