"""Aggregates: value domains, per-group reductions in arrival order, carried partials.

Algorithm: aggregates over arbitrary types (strings, timestamps, ...) work on integer
codes into a per-column *domain* of distinct values (sorted for min/max, so a code's
order is the value's order). A group's aggregate is an unbuffered ``ufunc.at`` reduction
over its events in arrival order, started from its carried partial: float sums are then a
left fold that a carried partial continues, so a replay split into partitions gives the
same bits as one replay.

Invariants: carried partials come first in every fold; a code of -1 is null; a partial
written to state does not depend on input row order (distinct members are sorted).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windowing.arrays import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    codes_in,
    starts_of,
)
from windowing.config import Aggregate
from windowing.kernel.decimals import (
    _decimal_array,
    _decimal_avg,
    _decimal_ints,
    _is_decimal,
    _split_overflow,
    _sum_dtype,
)
from windowing.kernel.inputs import _Events, _Keys, _scol
from windowing.kernel.spec import STATE_PREFIX, STATE_WINDOW, Spec


def _dkey(a: Aggregate) -> tuple[str, bool]:
    """Which value domain an aggregate codes its column in: sorted for min/max only."""
    return (a.column, a.type in ("min", "max"))


class _Domain(NamedTuple):
    """The distinct values of a column (sorted where order matters) and the table
    column's codes into them (-1 for null)."""

    values: pa.Array
    codes: np.ndarray


def _domains(spec: Spec, k: _Keys, ev: _Events) -> dict[tuple[str, bool], _Domain]:
    """Distinct values per column (events and carried partials), sorted where order matters.

    Aggregates over arbitrary types (strings, timestamps, ...) work on integer codes into
    these domains; only min/max need the codes to follow the values' order. One hash
    pass (``dictionary_encode``) gives both the values and the codes.
    """
    table = k.table
    out: dict[tuple[str, bool], _Domain] = {}
    state_rows = np.flatnonzero(k.kind == STATE_WINDOW)
    for a in spec.pipeline.aggregates:
        if a.type not in ("min", "max", "first", "last", "distinct") or _dkey(a) in out:
            continue
        column = table[a.column].combine_chunks()
        parts = [column]
        for b in spec.pipeline.aggregates:
            if b.column == a.column and len(state_rows) and b.type in ("min", "max", "first", "last", "distinct"):
                p = _scol(table, f"partial_{b.name}", state_rows)
                parts.append(pc.list_flatten(p) if b.type == "distinct" else p)
        allv = pa.concat_arrays(parts) if len(parts) > 1 else column
        enc = pc.dictionary_encode(allv)
        values = enc.dictionary
        codes = pc.fill_null(enc.indices.slice(0, len(column)), -1).to_numpy(zero_copy_only=False).astype(np.int64)
        if _dkey(a)[1] and len(values):
            order = pc.sort_indices(values).to_numpy()
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            values = values.take(pa.array(order))
            codes = np.where(codes >= 0, rank[np.maximum(codes, 0)], -1)
        out[_dkey(a)] = _Domain(values, codes)
    return out


def _value_arrays(spec: Spec, ev: _Events, domains) -> dict[tuple, tuple[np.ndarray, np.ndarray]]:
    """Per aggregate input: (numeric values or codes, non-null mask), in event order.

    Codes are computed on the table's column as it came and then permuted into event
    order: integers are cheap to move, strings are not.
    """
    out = {}
    table = ev.table
    for a in spec.pipeline.aggregates:
        if a.column is None:
            continue
        col = table[a.column].combine_chunks()
        valid = ~col.is_null().to_numpy(zero_copy_only=False)[ev.rows]
        if a.type in ("sum", "avg"):
            if _is_decimal(col.type):
                vals = _decimal_ints(col)[ev.rows]
            else:
                dtype = _sum_dtype(col.type)
                vals = pc.fill_null(col, 0).to_numpy(zero_copy_only=False).astype(dtype)[ev.rows]
            out[("num", a.column)] = (vals, valid)
        elif a.type == "count":
            out[("valid", a.column)] = (valid, valid)
        elif ("code", *_dkey(a)) not in out:
            out[("code", *_dkey(a))] = (domains[_dkey(a)].codes[ev.rows], valid)
    return out


def _state_partials(spec: Spec, k: _Keys, rows: np.ndarray, domains) -> list[dict]:
    """Partial aggregates of carried windows (table rows ``rows``), one dict per aggregate."""
    t = k.table
    take = pa.array(rows)
    out = []
    for a in spec.pipeline.aggregates:
        col = t[STATE_PREFIX + f"partial_{a.name}"].take(take).combine_chunks()
        p: dict[str, Any] = {}
        if a.type in ("sum", "avg"):
            st = spec.sum_type(a)
            if _is_decimal(st):
                p["s"] = _decimal_ints(col, st.scale)
                over = STATE_PREFIX + f"partial_{a.name}_overflow"
                if over in t.column_names:
                    high = pc.fill_null(t[over].take(take), 0).to_numpy().astype(np.int64)
                    if high.any():
                        p["s"] = p["s"] + high.astype(object) * 10 ** st.precision
            else:
                dtype = np.int64 if pa.types.is_integer(col.type) else np.float64
                p["s"] = pc.fill_null(col, 0).to_numpy(zero_copy_only=False).astype(dtype)
            n = t[STATE_PREFIX + f"partial_{a.name}_n"].take(take)
            p["n"] = pc.fill_null(n, 0).to_numpy().astype(np.int64)
        elif a.type == "count":
            p["n"] = pc.fill_null(col, 0).to_numpy().astype(np.int64)
        elif a.type == "distinct":
            lengths = pc.fill_null(pc.list_value_length(col), 0).to_numpy().astype(np.int64)
            p["members"] = (np.repeat(np.arange(len(rows)), lengths),
                            codes_in(pc.list_flatten(col), domains[_dkey(a)].values))
        else:
            p["code"] = codes_in(col, domains[_dkey(a)].values)
            if spec.keeps_arrival(a):
                p["at"] = _carried_arrival(t, a, rows, take)
        out.append(p)
    return out


def _carried_arrival(t: pa.Table, a: Aggregate, rows: np.ndarray, take: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(batch, seq) where carried sessions' ``first`` / ``last`` values arrived
    (:meth:`Spec.partial_fields`). State written before these columns existed has none:
    its sessions then rank by start, which is how merges combined them then."""
    names = [STATE_PREFIX + f"partial_{a.name}_{c}" for c in ("batch", "seq")]
    if not all(n in t.column_names for n in names):
        start = pc.fill_null(_scol(t, "window_start_ms", rows), 0).to_numpy().astype(np.int64)
        return np.full(len(rows), MIN_TIMESTAMP, dtype=np.int64), start
    b, q = (pc.fill_null(t[n].take(take), 0).to_numpy().astype(np.int64) for n in names)
    return b, q


def _final_value(a: Aggregate, p: dict, sel: np.ndarray, spec: Spec, domains) -> pa.Array:
    if a.type == "count":
        return pa.array(p["n"][sel], pa.int64())
    if a.type == "distinct":
        return pa.array(p["dcount"][sel], pa.int64())
    if a.type in ("sum", "avg"):
        n, s = p["n"][sel], p["s"][sel]
        if _is_decimal(spec.sum_type(a)):
            if a.type == "avg":
                return _decimal_avg(s, n, spec.sum_type(a), spec.output_type(a))
            return _decimal_array(s, n == 0, spec.output_type(a))
        if a.type == "avg":
            with np.errstate(invalid="ignore", divide="ignore"):
                return pa.array(s.astype(np.float64) / np.where(n > 0, n, 1), pa.float64(), mask=n == 0)
        return pa.array(s, spec.output_type(a), mask=n == 0)
    return _decode(p["code"][sel], domains[_dkey(a)].values)


def _decode(codes: np.ndarray, domain: pa.Array) -> pa.Array:
    mask = codes < 0
    return domain.take(pa.array(np.where(mask, 0, codes), pa.int64(), mask=mask)) if len(domain) else \
        pa.nulls(len(codes), domain.type)


def _partial_columns(a: Aggregate, p: dict, sel: np.ndarray, spec: Spec, domains) -> dict[str, pa.Array]:
    name = f"partial_{a.name}"
    if a.type in ("sum", "avg"):
        vt = spec.sum_type(a)
        if _is_decimal(vt):
            low, high = _split_overflow(p["s"][sel], vt)
            return {name: _decimal_array(low, np.zeros(len(sel), bool), vt),
                    name + "_n": pa.array(p["n"][sel], pa.int64()), name + "_overflow": pa.array(high, pa.int64())}
        return {name: pa.array(p["s"][sel], vt), name + "_n": pa.array(p["n"][sel], pa.int64())}
    if a.type == "count":
        return {name: pa.array(p["n"][sel], pa.int64())}
    if a.type == "distinct":
        grp, codes = p["members"]
        # Members of the selected groups, as one sorted list per group.
        pos = np.full(len(p["dcount"]), -1, dtype=np.int64)
        pos[sel] = np.arange(len(sel))
        keep = pos[grp] >= 0
        gi, ci = pos[grp[keep]], codes[keep]
        # Each list in value order: the carried state must not depend on input row order.
        values = _decode(ci, domains[_dkey(a)].values)
        order = pc.sort_indices(pa.table({"g": gi, "v": values}), [("g", "ascending"), ("v", "ascending")])
        gi = gi[order.to_numpy()]
        values = values.take(order)
        offsets = np.concatenate(([0], np.cumsum(np.bincount(gi, minlength=len(sel)))))
        return {name: pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)}
    out = {name: _decode(p["code"][sel], domains[_dkey(a)].values)}
    if spec.keeps_arrival(a):
        null = p["code"][sel] < 0
        out[name + "_batch"] = pa.array(p["at"][0][sel], pa.int64(), mask=null)
        out[name + "_seq"] = pa.array(p["at"][1][sel], pa.int64(), mask=null)
    return out


def _reduce(spec: Spec, grp: np.ndarray, ngroups: int, ev_idx: np.ndarray, values, domains,
            init: list[dict] | None, init_grp: np.ndarray) -> list[dict]:
    """Aggregate events ``ev_idx`` (in arrival order) into groups ``grp``.

    ``init`` are carried partials of groups ``init_grp``; they come first in every fold.
    """
    out = []
    for i, a in enumerate(spec.pipeline.aggregates):
        ini = init[i] if init is not None else None
        p: dict[str, Any] = {}
        if a.type == "count":
            if a.column is None:
                gv = grp
            else:
                gv = grp[values[("valid", a.column)][0][ev_idx]]
            p["n"] = np.bincount(gv, minlength=ngroups).astype(np.int64)
            if ini is not None:
                np.add.at(p["n"], init_grp, ini["n"])
        elif a.type in ("sum", "avg"):
            vals, valid = values[("num", a.column)]
            vals, valid = vals[ev_idx], valid[ev_idx]
            s = np.zeros(ngroups, dtype=vals.dtype)
            n = np.zeros(ngroups, dtype=np.int64)
            if ini is not None:
                s[init_grp] = ini["s"]
                n[init_grp] = ini["n"]
            np.add.at(s, grp[valid], vals[valid])  # unbuffered: a left fold in arrival order
            n += np.bincount(grp[valid], minlength=ngroups)
            p["s"], p["n"] = s, n
        else:
            codes, valid = values[("code", *_dkey(a))]
            ok = valid[ev_idx]
            gv, cv = grp[ok], codes[ev_idx][ok]
            if a.type == "distinct":
                C = np.int64(len(domains[_dkey(a)].values) + 1)
                mg, mc = gv, cv
                if ini is not None:
                    sg, sc = ini["members"]
                    mg, mc = np.concatenate([init_grp[sg], gv]), np.concatenate([sc, cv])
                # Distinct (group, value) pairs by hashing; their order does not matter.
                enc = pc.unique(pa.array(mg.astype(np.int64) * C + mc, pa.int64())).to_numpy()
                ug, uc = enc // C, enc % C
                p["dcount"] = np.bincount(ug, minlength=ngroups).astype(np.int64)
                p["members"] = (ug, uc)
            else:
                code = np.full(ngroups, -1, dtype=np.int64)
                if ini is not None:
                    code[init_grp] = ini["code"]
                if a.type == "min":
                    code[code < 0] = MAX_TIMESTAMP
                    np.minimum.at(code, gv, cv)
                    code[code == MAX_TIMESTAMP] = -1
                elif a.type == "max":
                    np.maximum.at(code, gv, cv)
                elif a.type == "first":  # carried first wins; else the first non-null event
                    u, idx = np.unique(gv, return_index=True)
                    keep = code[u] < 0
                    code[u[keep]] = cv[idx[keep]]
                else:  # last: the last non-null event; else the carried last
                    u, idx = np.unique(gv[::-1], return_index=True)
                    code[u] = cv[len(cv) - 1 - idx]
                p["code"] = code
        out.append(p)
    return out


# =========================================================================== tumbling / sliding


def _seg_cumsum_int(v: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Running integer sum restarting at each segment (exact, so a global cumsum works)."""
    if len(v) == 0:
        return v.astype(np.int64)
    c = np.cumsum(v)
    st = starts_of(seg)
    before = (c - v)[st]
    return c - np.repeat(before, np.diff(np.append(st, len(v))))


# =========================================================================== sessions


