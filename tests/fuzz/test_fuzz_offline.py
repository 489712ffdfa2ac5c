"""Offline model files: an exported model imports and runs as its graph did; corrupted files
(bit flips, truncation; header fields rewritten with a valid checksum; the JSON description
edited and the file re-sealed) are refused with a domain error, or import and run."""

from __future__ import annotations

import copy
import json
import struct
import zlib

from hypothesis import given
from hypothesis import strategies as st

from graphengine.engine import offline
from graphengine.engine.offline_codec import align

from .mutate import mutated_bytes
from .strategies import (
    assert_close,
    examples,
    import_and_run,
    reference,
    specs,
    time_limit,
    to_ir,
)

_HEADER = struct.Struct("<4sHHIIQQQQI12x")


# An export's bytes vary run to run (the report's timings): hypothesis replays an example
# with the same draws, so a spec exports once and the replay mutates the same bytes.
_EXPORTS: dict[tuple[str, bytes], bytes] = {}


def _export(session, spec) -> bytes:
    # The key is the whole spec: describe() names constants by shape, so their values too.
    key = (spec.describe(), b"".join(v.tobytes() for v in spec.consts.values()))
    if key not in _EXPORTS:
        gid = session.add_graph(to_ir(spec))
        try:
            _EXPORTS[key] = session.export_model(gid)
        finally:
            session.remove_graph(gid)
        while len(_EXPORTS) > 256:
            del _EXPORTS[next(iter(_EXPORTS))]
    return _EXPORTS[key]


def _seal(header: bytearray, body: bytes) -> bytes:
    """Header + body with the CRC recomputed, as the writer does."""
    data = bytearray(header) + body
    crc = zlib.crc32(data[52:], zlib.crc32(data[:48]))
    struct.pack_into("<I", data, 48, crc)
    return bytes(data)


def _parts(blob: bytes) -> tuple[dict, bytes]:
    _, _, _, hlen, _, dlen, woff, wlen, _, _ = _HEADER.unpack_from(blob)
    return json.loads(blob[hlen:hlen + dlen]), blob[woff:woff + wlen]


def _rebuild(desc: object, weights: bytes, flags: int = 0) -> bytes:
    text = json.dumps(desc, separators=(",", ":")).encode()
    woff = align(64 + len(text))
    header = bytearray(_HEADER.pack(b"GEOM", 1, flags, 64, 0, len(text), woff, len(weights),
                                    woff + len(weights), 0))
    return _seal(header, text + bytes(woff - 64 - len(text)) + weights)


@examples(45)
@given(spec=specs(max_nodes=5))
def test_offline_round_trip_matches_reference(session, spec):
    feeds = spec.feeds()
    want = reference(spec, feeds)
    blob = _export(session, spec)
    assert offline.is_offline_model(blob)
    with time_limit():
        gid = session.import_model(blob)
        try:
            got = session.run_graph(gid, feeds)
        finally:
            session.remove_graph(gid)
    for name, w in want.items():
        assert_close(got[name], w, f"offline output {name}\n{spec.describe()}")


@examples(90)
@given(data=st.data())
def test_mutated_offline_bytes(session, data):
    blob = _export(session, data.draw(specs(max_nodes=4)))
    bad = data.draw(mutated_bytes(blob))
    if data.draw(st.booleans()) and len(bad) >= 64:  # past the checksum: the fields count
        bad = _seal(bytearray(bad[:64]), bad[64:])
    import_and_run(session, bad, f"mutated offline model ({len(bad)} of {len(blob)} bytes)",
                   compile_first=False)


@examples(90)
@given(data=st.data())
def test_offline_header_fields(session, data):
    blob = _export(session, data.draw(specs(max_nodes=4)))
    fields = list(_HEADER.unpack_from(blob))
    k = data.draw(st.integers(1, 8))
    fields[k] = data.draw(st.sampled_from([0, 1, 2, 63, 64, 65, 1 << 31, (1 << 32) - 1])
                          if k <= 4 else st.sampled_from([0, 64, 1 << 40, (1 << 64) - 1,
                                                          fields[k] + 64, fields[k] - 1]))
    fields[k] &= (1 << (16 if k <= 2 else 32 if k <= 4 else 64)) - 1  # the field's width
    header = bytearray(_HEADER.pack(*fields))
    bad = _seal(header, blob[64:])
    import_and_run(session, bad, f"offline header field {k} = {fields[k]}", compile_first=False)


def _paths(x, path=()):
    """Every (container, key) in a JSON tree."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield x, k, path + (k,)
            yield from _paths(v, path + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield x, i, path + (i,)
            yield from _paths(v, path + (i,))


_VALUES = [None, 0, -1, 1, 7, 1 << 40, -(1 << 62), 1.5, float("inf"), "", "x",
           "graph:NoSuch", "model:CompiledModel", "dtypes:DType", True, [], {}, [1, 2],
           {"$": "tuple"}, {"$": "array", "dtype": "float32", "shape": [2], "nbytes": 8,
                            "offset": 1 << 40}, {"$": "enum", "type": "dtypes:DType",
                                                 "value": "nope"}, {"$": "bogus"}]


@examples(180)
@given(data=st.data())
def test_offline_description_edits(session, data):
    blob = _export(session, data.draw(specs(max_nodes=4)))
    desc, weights = _parts(blob)
    for _ in range(data.draw(st.integers(1, 3))):
        paths = list(_paths(desc))
        container, key, path = data.draw(st.sampled_from(paths))
        how = data.draw(st.sampled_from(["replace", "replace", "delete", "nudge"]))
        old = container[key]
        if how == "delete" and isinstance(container, dict):
            del container[key]
        elif how == "nudge" and isinstance(old, int) and not isinstance(old, bool):
            container[key] = old + data.draw(st.sampled_from([-64, -1, 1, 64, 1 << 20]))
        else:  # a copy: a later edit of this example must not change _VALUES itself
            # (an edit inside a shared value once made it contain itself: an endless tree)
            container[key] = copy.deepcopy(data.draw(st.sampled_from(_VALUES)))
    try:
        bad = _rebuild(desc, weights)
    except ValueError:  # inf in strict JSON
        bad = _rebuild(json.loads(json.dumps(desc).replace("Infinity", "1e400")), weights)
    import_and_run(session, bad, f"offline description edited at {path}", compile_first=False)
