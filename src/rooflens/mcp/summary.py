"""The tools' results cut to a size an agent's context can hold: pure functions over the JSON documents.

A summary keeps the documents' own keys and values (the report's are ``Report.to_json()``'s,
docs/report-schema.md) and cuts their long lists to one page; ``page`` says what was kept of how
many and how to ask for the rest. Whatever ``top`` asks for, a summary stays under ``max_bytes``:
past it, long evidence is shortened and the page halved until it fits, and ``page`` says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable

DEFAULT_TOP = 10  # findings and ops per page
DEFAULT_MAX_BYTES = 24_000  # the most a summary's JSON takes (compact, UTF-8)

FINDING_OPS = 8  # the ops a finding names, at most, in a summary
EVIDENCE_LINES_WHEN_TIGHT = 2  # a finding's evidence lines kept once a page is over max_bytes
MANY = 16  # hosts, sources, devices, notes shown at most
FEW = 2  # of the same, and of the programs, once a page is over max_bytes
METADATA_VALUE_BYTES = 400  # a capture-metadata entry larger than this is left to full=true
#: an op's row on a page: measured against its roofline (op(path, name) gives the rest: the arithmetic, the HLO,
#: achieved rates, events)
OP_KEYS = ("name", "program", "category", "opcode", "named_scope", "shape", "total_time_s", "executions",
           "runs_per_execution", "measured_s", "predicted_s", "ratio", "bound", "flops", "bytes", "comm_bytes",
           "flops_fraction_of_peak", "bytes_fraction_of_peak", "roofline_reliable", "roofline_bound", "roofline_note",
           "unpriced_reason")
SHAPE_CHARS = 200  # of an op's result shape on a page
MEMORY_KEYS = ("peak_bytes", "state_bytes", "peak_over_state", "padding_waste_bytes", "live_peak_bytes")
DEVICE_KEYS = ("device", "host", "busy_s", "idle_s", "window_s", "op_time_s", "events")


def size_bytes(doc) -> int:
    """The bytes of ``doc`` as the server sends it (compact JSON, UTF-8)."""
    return len(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def page_of(rows: list, top: int, offset: int) -> list:
    return list(rows[offset:offset + top])


def fitted(build: Callable[[int, bool], dict], top: int, max_bytes: int) -> dict:
    """``build(top, tight)`` for the largest ``top`` (halving) whose document fits in ``max_bytes``;
    ``tight`` shortens long text first. The page records the ``top`` asked for when it had to shrink."""
    asked, tight = top, False
    while True:
        doc = build(top, tight)
        if size_bytes(doc) <= max_bytes or (tight and top == 0):
            break
        if not tight:
            tight = True
        else:
            top //= 2
    if top != asked or tight:
        doc["page"]["fitted"] = {"top_asked": asked, "top_given": top, "evidence_shortened": tight,
                                 "max_bytes": max_bytes}
    return doc


def _finding(f: dict, tight: bool) -> dict:
    out = dict(f)
    ops = f.get("ops") or []
    if len(ops) > FINDING_OPS:
        out["ops"] = ops[:FINDING_OPS]
        out["ops_total"] = len(ops)
    if tight and len(f.get("evidence") or []) > EVIDENCE_LINES_WHEN_TIGHT:
        out["evidence"] = f["evidence"][:EVIDENCE_LINES_WHEN_TIGHT]
        out["evidence_total"] = len(f["evidence"])
    return out


def cut_text(text: str, chars: int) -> str:
    """``text`` up to ``chars`` characters, saying how many more there were."""
    return text if len(text) <= chars else text[:chars] + f" … ({len(text) - chars} more characters)"


def _op_row(c: dict) -> dict:
    row = {k: c[k] for k in OP_KEYS if k in c}
    if row.get("shape"):  # a loop's tuple of hundreds of buffers: op(path, name) has it whole
        row["shape"] = cut_text(row["shape"], SHAPE_CHARS)
    return row


def _capped(values: list, what: str, cut: list[str], limit: int = MANY) -> list:
    if len(values) > limit:
        cut.append(f"{what}: {limit} of {len(values)}")
        return values[:limit]
    return values


def report_summary(doc: dict, top: int = DEFAULT_TOP, offset: int = 0, max_bytes: int = DEFAULT_MAX_BYTES,
                   call: str = "report") -> dict:
    """One page of a report (``Report.to_json()``): the run, the chip and its reason, the steps, findings
    ranked by ``recoverable_s`` and the costliest ops measured against their roofline (``offset`` …
    ``offset + top`` of each), under ``max_bytes``."""
    findings = sorted(doc.get("findings") or [], key=lambda f: -(f.get("recoverable_s") or 0.0))
    comparison = doc.get("comparison") or []
    programs = doc.get("programs") or []

    def build(n: int, tight: bool) -> dict:
        cut: list[str] = []
        many = FEW if tight else MANY  # past max_bytes the side lists shrink first, the findings last
        steps = dict(doc.get("steps") or {})
        for long in ("times_s", "steps"):
            if isinstance(steps.get(long), list | tuple) and len(steps[long]) > MANY:
                cut.append(f"steps.{long}: one per step, {len(steps[long])}")
                steps.pop(long)
        metadata = {}
        for k, v in (doc.get("metadata") or {}).items():
            if not tight and size_bytes(v) <= METADATA_VALUE_BYTES:
                metadata[k] = v
            else:
                cut.append(f"metadata.{k}")
        window = doc.get("in_window") or {}
        devices = [{k: d.get(k) for k in DEVICE_KEYS} for d in doc.get("devices") or []]
        out = {
            "schema_version": doc.get("schema_version"),
            "path": doc.get("path"),
            "sources": _capped(list(doc.get("sources") or []), "sources", cut, many),
            "hosts": _capped(list(doc.get("hosts") or []), "hosts", cut, many),
            "chip": doc.get("chip"), "chip_reason": doc.get("chip_reason"), "platform": doc.get("platform"),
            "device_kind": doc.get("device_kind"), "num_devices": doc.get("num_devices"), "roofs": doc.get("roofs"),
            "steps": steps,
            "findings": [_finding(f, tight) for f in page_of(findings, n, offset)],
            "comparison": [_op_row(c) for c in page_of(comparison, n, offset)],
            "programs": _capped(page_of(programs, n, 0), "programs", cut, many),
            "by_category_s": doc.get("by_category_s"), "by_program_s": doc.get("by_program_s"),
            "devices": _capped(devices, "devices", cut, many),
            "memory": {k: v for k, v in (doc.get("memory") or {}).items() if k in MEMORY_KEYS},
            "in_window": {"compilations": page_of(window.get("compilations") or [], min(n, many), 0),
                          "whole_run": window.get("whole_run"),
                          "cache_misses": page_of(window.get("cache_misses") or [], min(n, many), 0),
                          "transfers": page_of(window.get("transfers") or [], min(n, many), 0)},
            "unran": page_of(doc.get("unran") or [], min(n, many), 0),
            "notes": _capped(list(dict.fromkeys(doc.get("notes") or [])), "notes", cut, many),  # once each
            "metadata": metadata,
        }
        if tight and len(out["by_program_s"] or {}) > many:
            cut.append(f"by_program_s: {len(out['by_program_s'])} programs")
            out["by_program_s"] = dict(list(out["by_program_s"].items())[:many])
        cut += ["op_stats", "graphs", "devices' gaps and transfers", "memory's buffers and timelines"]
        if doc.get("host_steps"):
            cut.append("host_steps")
        if "plan" in doc:
            out["plan"] = doc["plan"]
        out["page"] = {
            "top": n, "offset": offset,
            "findings_total": len(findings), "comparison_total": len(comparison), "programs_total": len(programs),
            "left_out": cut,
            "more": (f"{call}(..., top={n}, offset={offset + n}): the next page; op(path, name, program): one "
                     "op's arithmetic, HLO line and source; full=true: everything (docs/report-schema.md)"),
        }
        return out

    return fitted(build, top, max_bytes)


def rows_summary(doc: dict, lists: tuple[str, ...], top: int = DEFAULT_TOP, offset: int = 0,
                 max_bytes: int = DEFAULT_MAX_BYTES, call: str = "", trim: Callable[[dict], dict] | None = None
                 ) -> dict:
    """``doc`` with each of its ``lists`` cut to ``offset`` … ``offset + top`` (rows passed through
    ``trim``), under ``max_bytes``; ``page`` gives each list's total."""

    def build(n: int, tight: bool) -> dict:
        out = dict(doc)
        totals = {}
        for key in lists:
            rows = doc.get(key) or []
            totals[f"{key}_total"] = len(rows)
            out[key] = [trim(r) if trim else r for r in page_of(rows, n, offset)]
        more = any(total > offset + n for total in totals.values())
        out["page"] = {"top": n, "offset": offset, **totals,
                       "more": f"{call}(..., top={n}, offset={offset + n}) for the next page" if more else ""}
        return out

    return fitted(build, top, max_bytes)
