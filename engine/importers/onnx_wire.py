"""Reading an ONNX file with its weights in one aligned buffer, parsed once.

`onnx.load` reads the file into a bytes object, the protobuf parser copies every
initializer's `raw_data` into its own arena, and reading `raw_data` from Python copies it
once more: three fresh copies of the weights before the compiler sees them (for a 90 MB
encoder that is most of its load time, since fresh pages are slow to fault in). Here the
file is walked at the protobuf wire level instead: every top-level initializer's
`raw_data` payload (TensorProto field 9) is read straight from the file into one 64-byte
aligned `WeightBuffer`, and everything else (nodes, types, small tensors) is re-encoded
without those payloads and parsed by protobuf as usual. Initializers then become numpy
views of the buffer, and the compiler can lay out the device weights in place
(codegen/tasks.py), so a weight is copied once, from the page cache into the buffer.

Only the wire structure of ModelProto -> GraphProto (field 7) -> TensorProto (field 5)
is walked; anything unexpected (a wire type that is not length-delimited where a message
is due, a length past the end) raises `WireError`, and the caller falls back to the
ordinary parser, which reports the problem in its own words.
"""

from __future__ import annotations

import dataclasses
import io
import mmap
import os
import weakref

import numpy as np

ALIGN = 64

# Field numbers (onnx.proto): ModelProto.graph, GraphProto.initializer, TensorProto.raw_data.
_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_RAW_DATA = 9
# Payloads smaller than this stay in the parsed proto: moving them saves nothing.
_MIN_MOVED = 256


# The arrays owning the memory of split_weights' buffers (what a numpy view's `base` is),
# by id: codegen/tasks.py lays device weights out in them in place. A buffer is its owner
# minus ALIGN bytes, starting at the owner's first 64-byte aligned address.
_OWNERS: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()


def _aligned_part(owner: np.ndarray) -> np.ndarray:
    start = -owner.ctypes.data % ALIGN
    return owner[start:start + owner.nbytes - ALIGN]


def weight_buffer_of(arr: np.ndarray) -> np.ndarray | None:
    """The split_weights buffer `arr` is a view of, or None."""
    owner = arr.base
    if not isinstance(owner, np.ndarray) or _OWNERS.get(id(owner)) is not owner:
        return None
    return _aligned_part(owner)


class WireError(ValueError):
    """The bytes do not have the wire structure of an ONNX model."""


@dataclasses.dataclass
class WeightBuffer:
    """The raw_data payloads of the initializers, each 64-byte aligned in `data`.

    `spans[i]` is (offset, length) of initializer i's payload, or None when it stayed in
    the proto (small, absent, or external data).
    """

    data: np.ndarray  # uint8, 64-byte aligned start
    spans: list[tuple[int, int] | None]


class _Source:
    """Sequential reads over a file or an in-memory buffer."""

    def __init__(self, f: io.BufferedReader | None, mem: memoryview | None, size: int) -> None:
        self.f, self.mem, self.size, self.pos = f, mem, size, 0

    def read(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.size:
            raise WireError(f"a field of {n} bytes at offset {self.pos} runs past the end "
                            f"({self.size} bytes)")
        if self.mem is not None:
            out = bytes(self.mem[self.pos:self.pos + n])
        else:
            out = self.f.read(n)
            if len(out) != n:
                raise WireError(f"the file ended at offset {self.pos + len(out)}")
        self.pos += n
        return out

    def skip(self, n: int) -> None:
        if n < 0 or self.pos + n > self.size:
            raise WireError(f"a field of {n} bytes at offset {self.pos} runs past the end "
                            f"({self.size} bytes)")
        self.pos += n
        if self.mem is None:
            self.f.seek(self.pos)

    def copy_to(self, start: int, n: int, dst: memoryview) -> None:
        if self.f is None:
            dst[:] = self.mem[start:start + n]
            return
        # A file's payloads are read, not copied from its mapping: a mapping's pages, once
        # touched, count in the process's resident memory until it is closed.
        self.f.seek(start)
        got = self.f.readinto(dst)
        if got != n:
            raise WireError(f"the file ended while reading {n} bytes at offset {start}")
        self.f.seek(self.pos)

    def varint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= self.size:
                raise WireError(f"a varint runs past the end at offset {self.pos}")
            b = self.mem[self.pos] if self.mem is not None else self.f.read(1)[0]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise WireError(f"a varint longer than 10 bytes at offset {self.pos}")


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def _skip_value(src: _Source, wire: int, keep: bytearray | None) -> None:
    """Copies (into keep) or skips one field value of the given wire type."""
    if wire == 0:
        value = src.varint()
        if keep is not None:
            keep += _encode_varint(value)
    elif wire == 1:
        data = src.read(8)
        if keep is not None:
            keep += data
    elif wire == 5:
        data = src.read(4)
        if keep is not None:
            keep += data
    elif wire == 2:
        n = src.varint()
        if keep is not None:
            keep += _encode_varint(n) + src.read(n)
        else:
            src.skip(n)
    else:
        raise WireError(f"unsupported wire type {wire} at offset {src.pos}")


def _tensor(src: _Source, end: int, moved: list[tuple[int, int] | None]) -> bytes:
    """One initializer TensorProto, re-encoded without a large raw_data payload."""
    out = bytearray()
    span = None
    while src.pos < end:
        key = src.varint()
        number, wire = key >> 3, key & 7
        if number == _TENSOR_RAW_DATA and wire == 2:
            n = src.varint()
            if n >= _MIN_MOVED and span is None:
                span = (src.pos, n)
                src.skip(n)
                continue
            out += _encode_varint(key) + _encode_varint(n) + src.read(n)
            continue
        out += _encode_varint(key)
        _skip_value(src, wire, out)
    if src.pos != end:
        raise WireError(f"an initializer overruns its length at offset {src.pos}")
    moved.append(span)
    return bytes(out)


def _graph(src: _Source, end: int, moved: list[tuple[int, int] | None]) -> bytes:
    """The graph's fields, the initializers re-encoded (_tensor), the rest (nodes, inputs,
    types: thousands of fields) copied as they are, a run of them at a time."""
    out = bytearray()
    kept = src.pos  # where the run of fields copied as they are began
    while src.pos < end:
        at = src.pos
        key = src.varint()
        number, wire = key >> 3, key & 7
        if number == _GRAPH_INITIALIZER:
            if wire != 2:
                raise WireError(f"initializer with wire type {wire} at offset {src.pos}")
            out += src.mem[kept:at]
            n = src.varint()
            out += _field(_GRAPH_INITIALIZER, _tensor(src, src.pos + n, moved))
            kept = src.pos
            continue
        _skip_value(src, wire, None)
    if src.pos != end:
        raise WireError(f"the graph overruns its length at offset {src.pos}")
    out += src.mem[kept:end]
    return bytes(out)


def split_weights(path: str | os.PathLike | None = None, data: bytes | memoryview | None = None
                  ) -> tuple[bytes, WeightBuffer]:
    """The model's bytes without large initializer payloads, and those payloads.

    Give a file path or the serialized bytes. Raises WireError when the bytes are not
    shaped like a ModelProto (the caller then uses the ordinary parser for its message).
    """
    if path is not None:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise WireError("the file is empty")
            # The structure is walked in the file's mapping (a read call per varint byte
            # was most of the walk); the payloads are read from the file (copy_to).
            mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            mem = memoryview(mapping)
            try:
                return _split(_Source(f, mem, size))
            finally:
                try:
                    mem.release()
                    mapping.close()
                except BufferError:  # a slice an error's traceback holds: closed when freed
                    pass
    mem = memoryview(data).cast("B")
    return _split(_Source(None, mem, len(mem)))


def _split(src: _Source) -> tuple[bytes, WeightBuffer]:
    out = bytearray()
    moved: list[tuple[int, int] | None] = []
    seen_graph = False
    while src.pos < src.size:
        key = src.varint()
        number, wire = key >> 3, key & 7
        if number == _MODEL_GRAPH and wire == 2 and not seen_graph:
            n = src.varint()
            out += _field(_MODEL_GRAPH, _graph(src, src.pos + n, moved))
            seen_graph = True
            continue
        out += _encode_varint(key)
        _skip_value(src, wire, out)
    spans: list[tuple[int, int] | None] = []
    total = 0
    for span in moved:
        if span is None:
            spans.append(None)
            continue
        spans.append((total, span[1]))
        total += -(-span[1] // ALIGN) * ALIGN
    owner = np.empty(total + ALIGN, np.uint8)
    _OWNERS[id(owner)] = owner
    buf = _aligned_part(owner)
    view = memoryview(buf)
    for span, placed in zip(moved, spans):
        if span is not None:
            src.copy_to(span[0], span[1], view[placed[0]:placed[0] + span[1]])
    return bytes(out), WeightBuffer(buf, spans)


def packed_field(message: bytes, number: int) -> bytes | None:
    """The payload of a packed repeated field of fixed-width numbers (TensorProto's
    float_data, double_data) in a serialized message: its chunks joined, b"" when absent.
    None when the field also occurs unpacked (a writer may do that; the caller then reads it
    the ordinary way). Raises WireError on bytes that are not a message."""
    mem = memoryview(message).cast("B")
    src = _Source(None, mem, len(mem))
    chunks: list[memoryview] = []
    while src.pos < src.size:
        key = src.varint()
        field, wire = key >> 3, key & 7
        if field != number:
            _skip_value(src, wire, None)
        elif wire == 2:
            n = src.varint()
            start = src.pos
            src.skip(n)
            chunks.append(mem[start:start + n])
        else:
            return None
    return b"".join(chunks)


def top_level_fields(path: str | os.PathLike | None = None,
                     data: bytes | memoryview | None = None, limit: int = 64
                     ) -> tuple[list[tuple[int, int]], str | None]:
    """The (field number, wire type) pairs of a message's top-level fields, in order and
    without repeats, at most `limit` of them, and the wire problem that stopped the walk
    (None when the bytes are well-formed to the end). Payloads are skipped, not read: this
    is how importers/__init__.py tells an ONNX ModelProto from a TensorFlow GraphDef."""
    if path is not None:
        with open(path, "rb") as f:
            return _fields(_Source(f, None, os.fstat(f.fileno()).st_size), limit)
    mem = memoryview(data).cast("B")
    return _fields(_Source(None, mem, len(mem)), limit)


def _fields(src: _Source, limit: int) -> tuple[list[tuple[int, int]], str | None]:
    seen: list[tuple[int, int]] = []
    try:
        while src.pos < src.size:
            key = src.varint()
            field = (key >> 3, key & 7)
            if field[0] == 0:
                raise WireError(f"field number 0 at offset {src.pos}")
            _skip_value(src, field[1], None)
            if field not in seen:
                if len(seen) == limit:
                    break
                seen.append(field)
    except WireError as exc:
        return seen, str(exc)
    return seen, None
