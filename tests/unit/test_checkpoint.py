"""Checkpoints of a session's variables: the file format's round trip, and every damaged or
foreign file refused with what is wrong, changing nothing."""

from __future__ import annotations

import io
import json
import struct
import zlib

import numpy as np
import pytest

import graphengine
from graphengine.engine.errors import InvalidInput
from graphengine.server.core import checkpoint
from tests.unit.test_variables import counter

VALUES = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "step": np.array(7, np.int64),
          "mask": np.array([True, False, True]), "half": np.linspace(0, 1, 5).astype(np.float16),
          "empty": np.zeros((0, 3), np.int32)}


def _bytes(values=VALUES) -> bytes:
    return b"".join(checkpoint.checkpoint_chunks(values))


def _read(data: bytes) -> dict[str, np.ndarray]:
    return checkpoint.read_checkpoint(io.BytesIO(data), len(data), "(test)")


def test_the_format_round_trips_every_dtype_and_shape() -> None:
    data = _bytes()
    assert data[:8] == checkpoint.MAGIC
    back = _read(data)
    assert list(back) == list(VALUES)
    for name, value in VALUES.items():
        assert back[name].dtype == value.dtype and back[name].shape == value.shape
        np.testing.assert_array_equal(back[name], value)
    (length,) = struct.unpack("<Q", data[8:16])
    header = json.loads(data[16:16 + length])
    assert all(e["offset"] % 64 == 0 for e in header["variables"])


def _header(data: bytes) -> tuple[dict, int]:
    (length,) = struct.unpack("<Q", data[8:16])
    return json.loads(data[16:16 + length]), length


def _with_header(data: bytes, header: dict) -> bytes:
    """The file with its header replaced (and a valid checksum): payloads stay in place."""
    first = _header(data)[0]["variables"][0]["offset"]
    raw = json.dumps(header, separators=(",", ":")).encode()
    head = data[:8] + struct.pack("<Q", len(raw)) + raw + struct.pack("<I", zlib.crc32(raw))
    assert len(head) <= first
    return head + bytes(first - len(head)) + data[first:]


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]


@pytest.mark.parametrize(("damage", "message"), [
    (lambda d: b"NOTACKPT" + d[8:], "starts with b'NOTACKPT'"),
    (lambda d: d[:7] + b"\x09" + d[8:], "format version 9"),
    (lambda d: d[:8] + struct.pack("<Q", 1 << 40) + d[16:], "header claims 1099511627776 bytes"),
    (lambda d: _flip(d, 20), "header's checksum does not match"),
    (lambda d: d[:100], "header claims 4.. bytes \\(at most 80 here\\)"),
    (lambda d: d[:-10], "variable 'empty' lies at bytes .* passes the end of the file"),
    (lambda d: _flip(d, _header(d)[0]["variables"][0]["offset"] + 5), "'w' fails its checksum"),
    (lambda d: d[:12], "shorter than any checkpoint"),
])
def test_a_damaged_file_is_refused_naming_what_is_wrong(damage, message) -> None:
    with pytest.raises(InvalidInput, match=message):
        _read(damage(_bytes()))


def _edit(entry: int, **changes):
    def damage(data: bytes) -> bytes:
        header, _ = _header(data)
        header["variables"][entry].update(changes)
        return _with_header(data, header)
    return damage


@pytest.mark.parametrize(("damage", "message"), [
    (_edit(0, dtype="complex64"), "dtype 'complex64', not one of"),
    (_edit(0, shape=[-1, 4]), "invalid shape"),
    (_edit(0, shape=[1 << 30, 1 << 30, 1 << 30]), "invalid shape"),
    (_edit(0, nbytes=4), "says 4 bytes; float32"),
    (_edit(1, offset=64 * 3 + 1), "unaligned, overlaps"),
    (_edit(1, offset=1 << 40), "passes the end of the file"),
    (_edit(1, name="w"), "'w' appears twice"),
    (_edit(0, name=""), "entry 0 has no valid name"),
])
def test_a_header_that_lies_is_refused_before_anything_is_allocated(damage, message) -> None:
    with pytest.raises(InvalidInput, match=message):
        _read(damage(_bytes({"w": VALUES["w"], "step": VALUES["step"]})))


def test_a_session_checkpoint_round_trips_through_a_path_and_a_file(tmp_path) -> None:
    path = tmp_path / "state.ckpt"
    with graphengine.Session() as s:
        gid = s.add_graph(counter())
        for _ in range(2):
            s.run_graph(gid, {"x": np.arange(4, dtype=np.float32)})
        s.set_variables({"step": np.array(41, np.int64)})
        written = s.save_checkpoint(path)
        assert written == path.stat().st_size
        saved = s.get_variables()
        s.run_graph(gid, {"x": np.ones(4, np.float32)})  # moves on...
        s.set_variables({"step": np.array(0, np.int64)})
        assert sorted(s.restore_checkpoint(path)) == ["acc", "step"]  # ...and back
        for name, value in s.get_variables().items():
            np.testing.assert_array_equal(value, saved[name])
        assert s.run_graph(gid, {"x": np.ones(4, np.float32)})["total"].tolist() == [1, 3, 5, 7]
        buf = io.BytesIO()
        s.save_checkpoint(buf, names=["step"])
    with graphengine.Session() as other:  # into a session that has none of them
        buf.seek(0)
        assert other.restore_checkpoint(buf) == ["step"]
        assert int(other.get_variables()["step"]) == 41


def test_a_corrupt_checkpoint_changes_nothing(tmp_path) -> None:
    path = tmp_path / "state.ckpt"
    with graphengine.Session() as s:
        gid = s.add_graph(counter())
        s.set_variables({"acc": np.full(4, 3, np.float32), "n": np.arange(3)})
        s.save_checkpoint(path)
        s.set_variables({"acc": np.full(4, 9, np.float32), "n": np.arange(3) * 2})
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF  # the last variable's last byte
        path.write_bytes(bytes(data))
        with pytest.raises(InvalidInput, match=r"variable 'n' fails its checksum"):
            s.restore_checkpoint(path)
        assert s.get_variables()["acc"].tolist() == [9] * 4  # not half restored
        assert s.get_variables()["n"].tolist() == [0, 2, 4]
        with pytest.raises(InvalidInput, match="cannot open checkpoint"):
            s.restore_checkpoint(tmp_path / "missing.ckpt")
        assert s.run_graph(gid, {"x": np.ones(4, np.float32)})["total"].tolist() == [10] * 4


def test_a_checkpoint_cannot_change_the_type_of_a_variable_a_graph_uses() -> None:
    with graphengine.Session() as s:
        s.add_graph(counter())
        data = _bytes({"acc": np.zeros(5, np.float32)})
        with pytest.raises(InvalidInput, match=r"holds variable 'acc' as float32\[5\].* "
                                               r"graph 1 uses it"):
            s.restore_checkpoint(data)
