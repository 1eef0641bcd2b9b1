"""Derive an Nsight Systems SQLite export of a JAX program from a real nsys-jax archive (no real export of a
JAX program is public). What it holds, and what is real:

    python tools/derive_nsys_sqlite.py ARCHIVE.zip SCHEMA.sqlite OUT.DERIVED.sqlite

* the schema: every table is created with the CREATE TABLE text of a real export (``SCHEMA.sqlite``, an
  ``nsys export --type sqlite`` of Nsight Systems 2026.2, schema 3.25), its ENUM_* tables copied whole;
  TARGET_INFO_GPU and TARGET_INFO_NVTX_CUDA_DEVICE (absent from that export) with the columns nsys-jax
  read from the real export into ``device-metadata.parquet``;
* NVTX_EVENTS: real. Every row of the archive's ``report_nvtx_pushpop_trace.csv.xz`` (nsys's own export of
  the host-side push/pop ranges: start, end, thread), as push/pop ranges (eventType NvtxPushPopRange); the
  names without their domain prefix (``TSL:``/``NCCL:``), registered in StringIds (``textId``) as XLA and
  NCCL register theirs; the domain as a number per prefix (the export's NvtxDomainCreate rows are not in the
  archive, so there are none);
* TARGET_INFO_GPU / TARGET_INFO_NVTX_CUDA_DEVICE, ThreadNames, PROCESSES: real (the archive's
  ``device-metadata.parquet`` and ``thread-metadata.parquet``, which nsys-jax copied from the export);
* CUPTI_ACTIVITY_KIND_KERNEL: DERIVED. One kernel per ``Thunk`` range the archive projected onto the GPU
  (``nvtx_gpu_proj_trace/trace.parquet``): its start and end are the range's projected start and end
  (real GPU times; several kernels of one op become one), device 0 (the archive's one GPU), stream 7, or 13
  for an op that called NCCL (the archive does not say which streams); its name is the HLO op's with ``.``
  as ``_`` (as XLA names the kernels it emits; cuBLAS's and NCCL's own names are not in the archive); launch
  geometry and registers 0 (not in the archive);
* CUPTI_ACTIVITY_KIND_RUNTIME: DERIVED. One launching call per kernel, same ``correlationId``, on the
  thread that pushed the range: ``cudaLaunchKernelExC`` inside the op's last NCCL range where it has one
  (NCCL launches its kernel in ``ncclGroupEnd``), else ``cuLaunchKernel`` at the first instant of the op's
  host range outside its child ranges; 1 µs long at most;
* META_DATA_EXPORT: the real export's keys, with DERIVED_FROM / DERIVED_BY saying what this file is.

No session start (TARGET_INFO_SESSION_START_TIME, ANALYSIS_DETAILS): times are the archive's, in ns on the
capture's clock.
"""

from __future__ import annotations

import io
import lzma
import sqlite3
import sys
import zipfile
from collections import defaultdict
from pathlib import Path

import pyarrow.csv as pcsv
import pyarrow.parquet as pq

PUSH_POP = 59
KERNEL_STREAM, NCCL_STREAM = 7, 13
DOMAINS = {"TSL": 1, "NCCL": 2}
KEEP_ENUMS = ("ENUM_NSYS_EVENT_TYPE", "ENUM_NSYS_EVENT_CLASS", "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND",
              "ENUM_CUDA_KERNEL_LAUNCH_TYPE")
TABLES = ("StringIds", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "ThreadNames",
          "PROCESSES", "META_DATA_EXPORT", *KEEP_ENUMS)


def _member(z: zipfile.ZipFile, name: str) -> bytes:
    hit = next(n for n in z.namelist() if n == name or n.endswith("/" + name))
    return z.read(hit)


def _flat(col: str) -> tuple[str, str]:
    """``('TARGET_INFO_GPU', 'name')`` (pandas' MultiIndex, flattened into a parquet column name) → its parts."""
    if col.startswith("('"):
        a, b = col[2:-2].split("', '")
        return a, b
    return "", col


def derive(archive: Path, schema: Path, out: Path) -> None:
    z = zipfile.ZipFile(archive)
    hosts = pcsv.read_csv(io.BytesIO(lzma.decompress(_member(z, "report_nvtx_pushpop_trace.csv.xz")))).to_pylist()
    proj = pq.read_table(io.BytesIO(_member(z, "nvtx_gpu_proj_trace/trace.parquet"))).to_pylist()
    device = pq.read_table(io.BytesIO(_member(z, "device-metadata.parquet"))).to_pylist()
    threads = pq.read_table(io.BytesIO(_member(z, "thread-metadata.parquet"))).to_pylist()
    real = sqlite3.connect(f"file:{schema}?mode=ro", uri=True)
    out.unlink(missing_ok=True)
    db = sqlite3.connect(out)
    for name in TABLES:
        db.execute(real.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0])
    for name in KEEP_ENUMS:
        rows = real.execute(f"SELECT * FROM {name}").fetchall()
        db.executemany(f"INSERT INTO {name} VALUES ({','.join('?' * len(rows[0]))})", rows)
    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        if s not in strings:
            strings[s] = len(strings) + 1
        return strings[s]

    def gpid(pid: int) -> int:
        return (1 << 48) | (pid << 24)  # Nsight's serialized GlobalId: vm 1, process in bits 24-47

    # NVTX_EVENTS: every host range, real
    by_range = {}
    children = defaultdict(list)
    for h in hosts:
        domain, _, text = h["Name"].partition(":")
        db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, textId, domainId) VALUES (?,?,?,?,?,?)",
                   (h["Start (ns)"], h["End (ns)"], PUSH_POP, gpid(h["PID"]) | h["TID"], sid(text),
                    DOMAINS.get(domain, 0)))
        by_range[h["RangeId"]] = h
        if h["ParentId"] is not None:
            children[h["ParentId"]].append(h)
    # kernels and their launching calls: one per projected Thunk range, derived
    corr, inside_child = 0, 0
    for p in proj:
        if not (p["Name"] or "").startswith("TSL:Thunk:") or p["RangeId"] is None:
            continue
        h = by_range[int(p["RangeId"])]
        kids = sorted(children.get(h["RangeId"], []), key=lambda c: c["Start (ns)"])
        nccl = [c for c in kids if c["Name"].startswith("NCCL:")]
        if nccl:
            c = nccl[-1]
            at = (c["Start (ns)"] + c["End (ns)"]) // 2
            call, event_class = "cudaLaunchKernelExC_v11060", 0
        else:
            at = h["Start (ns)"] + 1 if h["End (ns)"] - h["Start (ns)"] > 1 else h["Start (ns)"]
            for c in kids:  # the first instant outside the child ranges
                if c["Start (ns)"] <= at <= c["End (ns)"]:
                    at = c["End (ns)"] + 1
            if at >= h["End (ns)"]:
                at, inside_child = h["Start (ns)"], inside_child + 1
            call, event_class = "cuLaunchKernel", 1
        corr += 1
        op = p["Name"].rsplit("hlo_op=", 1)[1].split(",")[0].rstrip("#")
        kname = sid(op.replace(".", "_"))
        start, end = p["Projected Start"], p["Projected Start"] + p["Projected Duration"]
        db.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId, "
            "globalPid, demangledName, shortName, mangledName, registersPerThread, gridX, gridY, gridZ, blockX, "
            "blockY, blockZ, staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId, "
            "tensorSizeMinusOneElements) VALUES (?,?,?,?,?,?,?,?,?,?,0,0,0,0,0,0,0,0,0,0,0,?,'')",
            (start, end, 0, 1, NCCL_STREAM if nccl else KERNEL_STREAM, corr, gpid(h["PID"]), kname, kname, kname, corr))
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, "
                   "returnValue) VALUES (?,?,?,?,?,?,0)",
                   (at, min(at + 1000, max(h["End (ns)"], at)), event_class, gpid(h["PID"]) | h["TID"], corr,
                    sid(call)))
    # the device, the threads and the process: real (nsys-jax's copies of the export's tables)
    gpu = {_flat(k): v for k, v in device[0].items()}
    for table in ("TARGET_INFO_GPU", "TARGET_INFO_NVTX_CUDA_DEVICE"):
        cols = [(c, v) for (t, c), v in gpu.items() if t == table]
        if table == "TARGET_INFO_GPU":
            cols.append(("cuDevice", gpu[("", "cuDevice")]))
        db.execute(f"CREATE TABLE {table} ({', '.join(f'{c} {_sql_type(v)}' for c, v in cols)})")
        db.execute(f"INSERT INTO {table} VALUES ({','.join('?' * len(cols))})", [v for _, v in cols])
    pids = {h["PID"] for h in hosts}
    for t in threads:
        if t["PID"] in pids:
            db.execute("INSERT INTO ThreadNames (nameId, priority, globalTid) VALUES (?,?,?)",
                       (sid(t["Name"]), t["Priority"], gpid(t["PID"]) | t["TID"]))
            if t["PID"] == t["TID"]:
                db.execute("INSERT INTO PROCESSES (globalPid, pid, name) VALUES (?,?,?)",
                           (gpid(t["PID"]), t["PID"], t["Name"]))
    meta = dict(real.execute("SELECT name, value FROM META_DATA_EXPORT").fetchall())
    meta.update({"DERIVED_FROM": f"{archive.name} (NVIDIA/JAX-Toolbox nsys-jax test data)",
                 "DERIVED_BY": "rooflens tools/derive_nsys_sqlite.py: NVTX_EVENTS real, one kernel per projected "
                               "Thunk range and its launching call derived"})
    db.executemany("INSERT INTO META_DATA_EXPORT VALUES (?,?)", meta.items())
    db.executemany("INSERT INTO StringIds VALUES (?,?)", [(i, s) for s, i in strings.items()])
    db.commit()
    db.execute("VACUUM")
    db.close()
    print(f"wrote {out}: {len(hosts)} NVTX ranges, {corr} kernels and launches ({inside_child} launched at their "
          f"op's start for want of a free instant), {out.stat().st_size / 1e6:.2f} MB")


def _sql_type(v) -> str:
    return "INTEGER" if isinstance(v, bool | int) else "REAL" if isinstance(v, float) else "TEXT"


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    derive(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
