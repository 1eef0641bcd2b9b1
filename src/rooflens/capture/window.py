"""One profiler window on a logdir, shared by ``rl.capture``, ``rl.trace.Session`` and ``rooflens run``.

Opening waits until the run directory the profiler will create is fresh (it names runs by the
second) and the devices have finished what ran before, then starts the trace and the recording of
compilations and transfers; closing waits until every local device has finished everything
dispatched (``common.drain_devices``: no async tail), stops both, finds the new run directory and
writes ``rooflens.json`` into it (versions, devices, what was recorded, and whatever the caller
adds), even when the traced code raised.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rooflens.capture.common import device_memory_bytes, drain_devices
from rooflens.capture.recorder import Recorder, recording
from rooflens.errors import RooflensError
from rooflens.hardware.catalog import local_chip_path
from rooflens.trace.manifest import RunManifest, calibration_record


def wait_for_fresh_run_name(logdir: Path) -> None:
    """The profiler names a run by the second it starts; never let a new run land in (and
    overwrite) an existing run directory of the same second."""
    profile = logdir / "plugins" / "profile"
    for _ in range(50):
        now = time.time()
        names = {time.strftime("%Y_%m_%d_%H_%M_%S", f(now)) for f in (time.localtime, time.gmtime)}
        if not any((profile / n).exists() for n in names):
            return
        time.sleep(0.1)


def _runs(logdir: Path) -> set[Path]:
    return {p for p in (logdir / "plugins" / "profile").glob("*") if p.is_dir()}


class TraceWindow:
    def __init__(self, logdir: str | Path, captured_by: str):
        self.logdir = Path(logdir)
        self.captured_by = captured_by
        self.run_dir: Path | None = None
        self.rec: Recorder | None = None
        self._rec_ctx = None
        self._before: set[Path] = set()
        self._t0 = 0.0
        self.is_open = False

    def open(self) -> TraceWindow:
        import jax

        self.logdir.mkdir(parents=True, exist_ok=True)
        wait_for_fresh_run_name(self.logdir)
        self._before = _runs(self.logdir)
        drain_devices.prepare()  # the barrier close() waits on, compiled before the trace starts
        drain_devices()  # and no tail of what ran before the window inside it (a warm-up's dropped results)
        self._t0 = time.time()
        jax.profiler.start_trace(str(self.logdir))
        self._rec_ctx = recording()
        self.rec = self._rec_ctx.__enter__()
        self.is_open = True
        return self

    def close(self, **metadata) -> Path:
        """Stop the trace; returns the new run directory, with ``rooflens.json`` written into it."""
        import jax

        self.is_open = False
        t0, notes = time.monotonic(), []
        try:
            drain_devices()  # what was dispatched runs inside the trace
        except Exception as e:  # a device in error: stop what can be stopped, say so
            notes.append(f"could not wait for the devices to finish ({type(e).__name__}: {e}); the trace may miss "
                         "the last executions dispatched")
        drained_s = time.monotonic() - t0
        try:
            self._rec_ctx.__exit__(None, None, None)
        finally:
            jax.profiler.stop_trace()
        new = sorted(_runs(self.logdir) - self._before)
        if not new:
            raise RooflensError(f"the profiler wrote no run under {self.logdir}/plugins/profile.")
        self.run_dir = new[-1]
        devices = jax.devices()
        manifest = RunManifest.of(
            captured_by=self.captured_by, when_unix_s=self._t0, wall_s=time.time() - self._t0,
            jax_version=jax.__version__, jaxlib_version=getattr(jax.lib, "__version__", ""),
            backend=jax.default_backend(), device_kind=devices[0].device_kind, num_devices=len(devices),
            devices=[{"id": d.id, "kind": d.device_kind, "platform": d.platform} for d in devices],
            num_local_devices=jax.local_device_count(), device_memory_bytes=device_memory_bytes(devices[0]),
            in_window=self.rec.record(), drained_s=round(drained_s, 6), **({"notes": notes} if notes else {}),
            calibration=calibration_record(str(local_chip_path())) if jax.default_backend() == "cpu" else None,
            **metadata,
        )
        (self.run_dir / "rooflens.json").write_text(json.dumps(manifest.to_dict(), indent=2, default=str))
        return self.run_dir
