"""A Chrome-trace (Perfetto) file of the device ops, each annotated with its roofline.

ui.perfetto.dev and chrome://tracing open it: one process per device, one thread per stream or
thread line, every op with ``args`` carrying its program, category, scope, predicted time and the
ratio measured/predicted. The ``hlo_op``/``hlo_module``/``device_ordinal`` args are the ones JAX's
own exporter writes, so ``rl.load`` reads the file back too. It writes the Report's op events
(``report.events``) as they are, one trace event each.
"""

from __future__ import annotations

import gzip

from rooflens.report.text import json_text


def chrome_trace(report) -> dict:
    t = report.events
    comp = {(c.program, c.name): c for c in report.comparison}
    lanes: dict[tuple[int, int], int] = {}
    threads: dict[tuple[int, int, int], int] = {}
    meta, events = [], []
    start_ns, dur_ns = t.start_ns, t.dur_ns
    for i in range(len(t)):
        dev_key = (int(t.host[i]), int(t.device[i]))
        if dev_key not in lanes:
            lanes[dev_key] = len(lanes) + 1
            meta.append({"ph": "M", "pid": lanes[dev_key], "name": "process_name",
                         "args": {"name": f"{t.hosts[dev_key[0]]} device {dev_key[1]}"}})
        pid = lanes[dev_key]
        tkey = (*dev_key, int(t.line[i]))
        if tkey not in threads:
            threads[tkey] = len(threads) + 1
            meta.append({"ph": "M", "pid": pid, "tid": threads[tkey], "name": "thread_name",
                         "args": {"name": t.lines[tkey[2]]}})
        tid = threads[tkey]
        program, name = t.programs[t.program[i]], t.names[t.name[i]]
        c = comp.get((program, name))
        args = {"hlo_op": name, "hlo_module": program, "device_ordinal": str(dev_key[1])}
        if c is not None:
            args.update(category=c.category, scope=c.named_scope, bound=c.bound)
            if c.predicted_s is not None:
                args.update(predicted_us=round(c.predicted_s * 1e6, 3), ratio=round(c.ratio, 3) if c.ratio else None)
        events.append({"ph": "X", "pid": pid, "tid": tid, "ts": float(start_ns[i]) / 1e3,
                       "dur": float(dur_ns[i]) / 1e3, "name": name, "args": args})
    return {"displayTimeUnit": "ns", "traceEvents": meta + events,
            "metadata": {"rooflens_chip": report.chip, "source": ", ".join(report.sources)}}


def write_perfetto(report, path: str) -> None:
    data = json_text(chrome_trace(report), indent=False).encode()
    with open(path, "wb") as fh:
        fh.write(gzip.compress(data) if str(path).endswith(".gz") else data)
