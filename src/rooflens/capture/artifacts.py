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
import sys

if __package__:
    from rooflens.capture.common import program_name as common_program_name
else:  # loaded by path, after the launcher loaded common the same way (its ``_sibling``)
    common_program_name = sys.modules["_rooflens_common"].program_name


def read_miss(text: str) -> dict:
    """What one of JAX's ``TRACING CACHE MISS`` explanations (``jax_explain_cache_misses``) says: the
    function (``function``), where it is defined (``defined_at``, "" if not said), whether JAX had seen
    it before (``seen``: a new key of a known function, versus ``never seen function``), and, for a
    known function, what differs from its closest earlier key (``differs``: JAX's heading and bullets
    in one line, its documentation link left out)."""
    lines = [ln.rstrip() for ln in text.splitlines()]
    out = {"function": "", "defined_at": "", "seen": False, "differs": ""}
    for i, ln in enumerate(lines):
        s = ln.strip()
        if s == "never seen function:" and i + 1 < len(lines):
            head = lines[i + 1].strip()
            name, _, rest = head.partition(" id=")
            out["function"] = name.strip()
            out["defined_at"] = rest.split(" defined at ", 1)[1].strip() if " defined at " in rest else ""
            return out
        if s.startswith("for ") and not out["function"]:
            name, _, at = s[4:].partition(" defined at ")
            out.update(function=name.strip(), defined_at=at.strip(), seen=True)
            body = [re.sub(r"https?://\S+", "", b).strip() for b in lines[i + 1:]]
            body = [b for b in body if b and not b.startswith("all previously seen cache keys differ")]
            heading = next((b.rstrip(":") for b in body if not b.startswith("*")), "")
            bullets = [b.lstrip("* ").strip() for b in body if b.startswith("*")]
            out["differs"] = "; ".join(([heading] if heading else []) + bullets) or "a cache miss"
            return out
    return out


def classify_compiles(compiles: list[dict], misses: list[dict], made: set[str] | None = None
                      ) -> tuple[list[dict], list[dict]]:
    """(first compilations, recompilations), each compilation with its ``function``, ``defined_at``,
    ``nth`` (its how-manieth compilation of that function) and JAX's ``explanation``.

    A compilation's explanation is the latest cache miss logged before it starts whose function's
    program is the one compiled (the misses of functions traced inside it, loop bodies and the like,
    are not its). It is a recompilation when that miss is of a function JAX had seen before (its
    reason: what differs, as JAX says it); when it is the third or later compilation of a 'never seen'
    function defined at one place (a fresh jit or lambda each time); or, with no explanation, when a
    jitted function of the script's (``made``: their names) compiles again under the same name."""
    own = {common_program_name(f) for f in made or ()}
    first, again = [], []
    infos = [read_miss(m["text"]) for m in misses]
    by_program: dict[str, list[int]] = {}  # program → its misses, in time order
    for k, info in enumerate(infos):
        if info["function"]:
            by_program.setdefault(common_program_name(info["function"]), []).append(k)
    count: dict[tuple[str, str], int] = {}
    fresh: dict[str, int] = {}  # definition site → 'never seen' compilations
    for c in sorted(compiles, key=lambda c: c.get("start_unix_s") or 0.0):
        module = c.get("module") or ""
        start = (c.get("start_unix_s") or 0.0) + 1e-3
        mine = by_program.get(module, [])
        before = [k for k in mine if misses[k]["t_unix_s"] <= start]
        pick = before[-1] if before else None
        info = infos[pick] if pick is not None else None
        if pick is not None:  # this compilation's miss, and any older one of the same program left unused
            by_program[module] = [k for k in mine if k > pick]
        function = info["function"] if info else module[4:] if module.startswith("jit_") else module
        site = info["defined_at"] if info else ""
        if c.get("own") is False:  # JAX's (jnp.add's jit_add adding a bias outside jit): compiled once per shape,
            first.append({**c, "function": function, "defined_at": site, "nth": 1, "explanation": ""})  # apart from
            continue  # a script's own `add`: no recompilation of anything
        n = count[(module, site)] = count.get((module, site), 0) + 1
        reason = ""
        if info and info["seen"]:
            reason = info["differs"]
        elif info:
            fresh[site] = fresh.get(site, 0) + 1
            if site and fresh[site] >= 3:
                reason = (f"a new function object for the code at {site} (jax.jit or a lambda created again), "
                          f"compiled {fresh[site]} times")
        elif n >= 2 and module in own:
            reason = (f"{function} compiled again (compilation {n} of {module}); JAX logged no cache-miss explanation "
                      "for it")
        c = {**c, "function": function, "defined_at": site, "nth": n,
             "explanation": misses[pick]["text"] if pick is not None else ""}
        if reason:
            again.append({**c, "reason": reason})
        else:
            first.append(c)
    return first, again


def split_by_trace(again: list[dict], t0_unix_s: float, t1_unix_s: float) -> tuple[list[dict], list[dict]]:
    """(inside, outside): the recompilations that overlap the traced window [t0, t1] and the others,
    each marked ``in_trace``."""
    inside, outside = [], []
    for c in again:
        hit = (c.get("end_unix_s") or 0.0) > t0_unix_s and (c.get("start_unix_s") or 0.0) < t1_unix_s
        (inside if hit else outside).append({**c, "in_trace": hit})
    return inside, outside


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
