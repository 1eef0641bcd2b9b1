"""The HLO of every program a trace ran, from the XSpace's ``/host:metadata`` plane.

jax's ``ProfileData`` does not expose event metadata, where the profiler stores each program's
``xla.HloProto`` (stat ``Hlo Proto``). This reads just that plane with a minimal protobuf wire
decoder (other planes are skipped by their length, so it costs little even on large files) and
prints each module as HLO text through jaxlib.

Fields used (tsl/profiler/protobuf/xplane.proto): XSpace.planes = 1; XPlane.name = 2,
event_metadata = 4 (map<int64, XEventMetadata>), stat_metadata = 5 (map<int64, XStatMetadata>);
XEventMetadata.name = 2, stats = 5; XStat.metadata_id = 1, bytes_value = 6;
XStatMetadata.name = 2; HloProto.hlo_module = 1.
"""

from __future__ import annotations

from rooflens.trace.formats.protowire import fields as _fields


def _string(mv) -> str:
    return bytes(mv).decode("utf-8", "replace")


def hlo_protos(xspace) -> dict[str, bytes]:
    """Program name → serialized HloModuleProto, for every program in the metadata plane."""
    data = memoryview(xspace)
    out: dict[str, bytes] = {}
    for num, wt, plane in _fields(data):
        if num != 1 or wt != 2:
            continue
        name = ""
        event_meta, stat_names = [], {}
        for f, w, v in _fields(plane):
            if f == 2 and w == 2:
                name = _string(v)
                if name != "/host:metadata":
                    break
            elif f == 4 and w == 2:
                event_meta.append(v)
            elif f == 5 and w == 2:
                sid, sname = 0, ""
                for kf, _, kv in _fields(v):
                    if kf == 2:
                        for mf, _, mv in _fields(kv):
                            if mf == 1 and isinstance(mv, int):
                                sid = mv
                            elif mf == 2:
                                sname = _string(mv)
                stat_names[sid] = sname
        if name != "/host:metadata":
            continue
        proto_ids = {k for k, v in stat_names.items() if v == "Hlo Proto"}
        for entry in event_meta:
            for kf, _, meta in _fields(entry):
                if kf != 2:
                    continue
                ev_name, blob = "", None
                for mf, mw, mv in _fields(meta):
                    if mf == 2 and mw == 2:
                        ev_name = _string(mv)
                    elif mf == 5 and mw == 2:
                        sid, b = None, None
                        for sf, sw, sv in _fields(mv):
                            if sf == 1 and sw == 0:
                                sid = sv
                            elif sf == 6 and sw == 2:
                                b = sv
                        if sid in proto_ids and b is not None:
                            blob = b
                if blob is not None:
                    for hf, hw, hv in _fields(blob):
                        if hf == 1 and hw == 2:  # HloProto.hlo_module
                            out[ev_name] = bytes(hv)
    return out


def hlo_printer():
    """jaxlib's HLO module bindings (``HloModule.from_serialized_hlo_module_proto``, ``to_string``).

    Recent jaxlibs ship them as their own extension, ``jaxlib._hlo``: loading it alone takes about a third
    of ``import jax`` (which imports it too, with everything else). Older ones have them only in the
    extension behind ``jax._src.lib``."""
    try:
        from jaxlib import _hlo as hlo
    except ImportError:
        from jax._src.lib import hlo
    return hlo


def print_modules(protos: dict[str, bytes]) -> dict[str, str]:
    """Program name → HLO text of serialized HloModuleProtos, printed by jaxlib."""
    if not protos:
        return {}
    hlo = hlo_printer()
    out = {}
    for name, proto in protos.items():
        try:
            module = hlo.HloModule.from_serialized_hlo_module_proto(proto)
        except Exception:  # a proto this jaxlib cannot read: the ops just lack scopes
            continue
        out[name] = module.to_string()
    return out


def hlo_texts(xspace) -> dict[str, str]:
    """Program name → HLO text (printed by jaxlib) of every program the trace recorded."""
    return print_modules(hlo_protos(xspace))
