"""Serialized HLO modules from older XLA versions, made readable by the jaxlib installed here.

XLA before late 2024 numbered instructions and computations across the whole module (ids in the
millions in a large optimized module: the nsys-jax Pax dump's step program has ids up to 2.1 M).
Newer XLA sizes per-computation tables by the largest id, so jaxlib 0.10.2 reading such a proto
allocates (computations × largest id) entries: 4.7 GB for a 26 k-instruction module, and
``std::bad_alloc`` for the 2,533-computation step program. :func:`compact_ids` renumbers every
computation densely and every instruction densely within its computation, rewriting each
reference (``operand_ids``, ``control_predecessor_ids``, ``called_computation_ids``, ``root_id``,
``entry_computation_id`` and the schedule), on the wire format, leaving every other byte as is.
The printed module is then the same text (names are what the text shows, not ids).

Fields (openxla/xla ``xla/service/hlo.proto``): HloModuleProto entry_computation_id = 6,
computations = 3, schedule = 7; HloComputationProto instructions = 2, id = 5, root_id = 6;
HloInstructionProto id = 35, operand_ids = 36, control_predecessor_ids = 37,
called_computation_ids = 38; HloScheduleProto sequences = 1 (map: key = 1, value = 2);
InstructionSequence instruction_ids = 1.
"""

from __future__ import annotations

from rooflens.trace.formats.protowire import bytes_field, encode_varint, field_spans, int_values, varint_field


def _ranks(ids) -> dict[int, int]:
    """Old id → new dense id, in the old ids' order (XLA prints computations in id order)."""
    out = {x: k for k, x in enumerate(sorted(set(ids)))}
    if len(out) != len(ids):
        raise ValueError("two instructions of one computation share an id")
    return out


def _packed(num: int, values, new: dict[int, int]) -> bytes:
    return bytes_field(num, b"".join(encode_varint(new[x]) for x in values))


def compact_ids(module: bytes) -> bytes:
    """The same HloModuleProto with dense ids (see the module doc); ValueError on a malformed one."""
    ins_new: dict[int, dict[int, int]] = {}  # computation id → its instructions' new ids
    fields = list(field_spans(module))
    for num, wt, _, v, _ in fields:
        if num == 3 and wt == 2:
            cid, ids = None, []
            for cn, cw, _, cv, _ in field_spans(module, *v):
                if cn == 5 and cw == 0:
                    cid = cv
                elif cn == 2 and cw == 2:
                    ids += [iv for i_n, iw, _, iv, _ in field_spans(module, *cv) if i_n == 35 and iw == 0]
            if cid is None or cid in ins_new:
                raise ValueError("a computation has no id, or the id of another")
            ins_new[cid] = _ranks(ids)
    comp_new = _ranks(ins_new)
    out = []
    for num, wt, s, v, e in fields:
        if num == 6 and wt == 0:
            out.append(varint_field(6, comp_new[v]))
        elif num == 3 and wt == 2:
            out.append(bytes_field(3, _computation(module, v, comp_new, ins_new)))
        elif num == 7 and wt == 2:
            out.append(bytes_field(7, _schedule(module, v, comp_new, ins_new)))
        else:
            out.append(module[s:e])
    return b"".join(out)


def _computation(buf: bytes, span, comp_new: dict, ins_new: dict) -> bytes:
    cid = next(cv for cn, cw, _, cv, _ in field_spans(buf, *span) if cn == 5 and cw == 0)
    local = ins_new[cid]
    out = []
    for cn, cw, s, cv, e in field_spans(buf, *span):
        if cn == 5 and cw == 0:
            out.append(varint_field(5, comp_new[cv]))
        elif cn == 6 and cw == 0:
            out.append(varint_field(6, local[cv]))
        elif cn == 2 and cw == 2:
            ins = []
            for i_n, iw, i_s, iv, i_e in field_spans(buf, *cv):
                if i_n == 35 and iw == 0:
                    ins.append(varint_field(35, local[iv]))
                elif i_n in (36, 37):
                    ins.append(_packed(i_n, int_values(buf, iw, iv), local))
                elif i_n == 38:
                    ins.append(_packed(i_n, int_values(buf, iw, iv), comp_new))
                else:
                    ins.append(buf[i_s:i_e])
            out.append(bytes_field(2, b"".join(ins)))
        else:
            out.append(buf[s:e])
    return b"".join(out)


def _schedule(buf: bytes, span, comp_new: dict, ins_new: dict) -> bytes:
    out = []
    for num, wt, s, v, e in field_spans(buf, *span):
        if num != 1 or wt != 2:
            out.append(buf[s:e])
            continue
        key, seq = None, None
        for kn, kw, _, kv, _ in field_spans(buf, *v):
            if kn == 1 and kw == 0:
                key = kv
            elif kn == 2 and kw == 2:
                seq = kv
        if key not in comp_new:
            continue  # a sequence of a computation the module does not hold: dropped, as XLA would refuse it
        ids = []
        if seq is not None:
            for sn, sw, _, sv, _ in field_spans(buf, *seq):
                if sn == 1:
                    ids += int_values(buf, sw, sv)
        local = ins_new[key]
        body = varint_field(1, comp_new[key]) + bytes_field(2, _packed(1, ids, local) if ids else b"")
        out.append(bytes_field(1, body))
    return b"".join(out)
