"""What ``rooflens run`` saves beside the trace once the script is done: standard library only.

Loaded by path in the launched interpreter by :mod:`rooflens.capture.launch` (its ``_sibling``).
``classify_compiles`` tells first compilations from recompilations; ``save`` writes
``rooflens.json``, ``hlo/`` (the programs as compiled, from the private XLA dump) and ``memory/``
(XLA's buffer assignment and live ranges of each program, the end-of-run device snapshot).
"""

from __future__ import annotations

import json
import os
import re


def classify_compiles(compiles: list[dict], misses: list[dict]) -> tuple[list[dict], list[dict]]:
    """(first compilations, recompilations). A compilation is a recompilation when JAX explains
    its cache miss by an earlier key of the same function, or when the same definition site was
    compiled twice before as a 'never seen' function (a fresh jit/lambda each time)."""
    first, again = [], []
    miss_i = 0
    sites: dict[str, int] = {}
    for c in compiles:
        reason = ""
        text = ""
        while miss_i < len(misses) and misses[miss_i]["t_unix_s"] <= c["start_unix_s"] + 1e-3:
            text = misses[miss_i]["text"]
            miss_i += 1
        if text:
            lines = [ln.strip() for ln in text.splitlines()]
            site = next((ln.split(" defined at ", 1)[1] for ln in lines if " defined at " in ln), "")
            if "never seen function" in text:
                sites[site] = sites.get(site, 0) + 1
                if site and sites[site] >= 3:
                    reason = (f"a new function object for the code at {site} (jax.jit or a lambda created again), "
                              f"compiled {sites[site]} times")
            else:  # the last line says what differs: "* at x, now f32[16] and before f32[8]"
                reason = next((ln.lstrip("* ") for ln in reversed(lines) if ln), "a cache miss")
        c = {**c, "explanation": text}
        if reason:
            again.append({**c, "reason": reason})
        else:
            first.append(c)
    return first, again


def dump_files(dump_dir: str) -> dict[str, dict[str, str]]:
    """Module file stem (``module_0012.jit_step``) → {kind: path} for what a capture keeps."""
    out: dict[str, dict[str, str]] = {}
    if not dump_dir or not os.path.isdir(dump_dir):
        return out
    kinds = {"-buffer-assignment.txt": "buffer-assignment", "-live-range.txt": "live-range",
             "-memory-usage-report.txt": "memory-usage-report", "after_optimizations.txt": "hlo"}
    for f in sorted(os.listdir(dump_dir)):
        m = re.match(r"^(module_\d+\.[^.]+)\..*?(after_optimizations(?:-buffer-assignment|-live-range|"
                     r"-memory-usage-report)?\.txt)$", f)
        if not m:
            continue
        for suffix, kind in kinds.items():
            if m.group(2).endswith(suffix) and (kind != "hlo" or m.group(2) == "after_optimizations.txt"):
                out.setdefault(m.group(1), {})[kind] = os.path.join(dump_dir, f)
    return out


def save(state, meta: dict, programs: set[str] | None = None) -> None:
    """rooflens.json, hlo/ and memory/ in the run directory (process 0's, in a job).

    ``state``: the launcher's state (saved_dir, dump_dir, compiles, process_index, label, snapshot).
    ``programs``: keep the HLO and memory of these program names only (a window: the programs it
    ran), when any of them was compiled; None keeps every program's."""
    import shutil

    run_dir = state.saved_dir
    memory: dict[str, dict] = {}
    files = dump_files(state.dump_dir)
    user_dump = re.search(r"--xla_dump_to=(\S+)", os.environ.get("XLA_FLAGS", ""))
    if not files and user_dump:
        files = dump_files(user_dump.group(1))
    mem_dir = os.path.join(run_dir, "memory")
    hlo_dir = os.path.join(run_dir, "hlo")
    owner = state.process_index == 0
    if owner:
        os.makedirs(mem_dir, exist_ok=True)
        os.makedirs(hlo_dir, exist_ok=True)
    by_name: dict[str, list[str]] = {}
    for stem in files:
        by_name.setdefault(stem.split(".", 1)[1], []).append(stem)
    compiled = {c["module"] for c in state.compiles} | set(by_name)
    keep = (compiled & programs if programs else set()) or compiled
    by_name = {k: v for k, v in by_name.items() if k in keep}
    stats_by_name: dict[str, list[dict]] = {}
    for c in state.compiles:
        if c.get("memory") and c["module"] in keep:
            stats_by_name.setdefault(c["module"], []).append(c["memory"])
    for name, stems in by_name.items():
        stems.sort()
        # the program of this name with the largest compiled footprint stands for it
        stats = stats_by_name.get(name, [])
        pick = max(range(len(stems)), key=lambda i: footprint(stats[i]) if i < len(stats) else -1)
        if owner:
            for kind, path in files[stems[pick]].items():
                if kind == "hlo":
                    for stem in stems:
                        if "hlo" in files[stem]:
                            shutil.copyfile(files[stem]["hlo"], os.path.join(hlo_dir, f"{stem}.txt"))
                else:
                    shutil.copyfile(path, os.path.join(mem_dir, f"{name}.{kind}.txt"))
        memory[name] = stats[pick] if pick < len(stats) else {}
    for name, stats in stats_by_name.items():  # compiled, but no dump (the script's own dump flags, …)
        memory.setdefault(name, max(stats, key=footprint))
    meta["memory"] = memory
    if state.snapshot and owner:
        with open(os.path.join(mem_dir, "end.pb.gz"), "wb") as fh:
            fh.write(state.snapshot)
    name = "rooflens.json" if owner else f"{state.label}.rooflens.json"
    tmp = os.path.join(run_dir, f".{name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        json.dump(meta, fh, indent=1, default=str)
    os.replace(tmp, os.path.join(run_dir, name))
    if state.dump_dir:
        shutil.rmtree(state.dump_dir, ignore_errors=True)


def footprint(stats: dict) -> int:
    return sum(v for k, v in stats.items() if not k.startswith("host_") and "generated_code" not in k)


def explained(misses: list[dict], again: list[dict]) -> list[dict]:
    """The cache misses that explain the recompilations ``again``."""
    texts = {c.get("explanation") for c in again}
    return [m for m in misses if m["text"] in texts]
