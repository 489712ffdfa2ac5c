"""The checkpoint file: a session's variables, with checksums, read with bounds.

Layout (all integers little-endian):

    offset 0   magic  b"GEVARS" 0x00 0x01   (the last byte is the format version, 1)
           8   u64    H: length of the header
          16   H bytes of UTF-8 JSON: {"variables": [{"name", "dtype", "shape",
               "offset", "nbytes", "crc32"}, ...]}
        16+H   u32    CRC-32 of the header bytes
               zero padding to the first payload
               each variable's raw bytes (row-major, native little-endian), at its "offset"
               from the start of the file, 64-byte aligned, in header order

Reading checks everything before it allocates for it: the magic and version, the header's
length (<= 16 MiB) and checksum, every entry (a name of 1..4096 printable characters, used
once; a dtype a variable may hold; rank <= 32, dims >= 0, nbytes = elements x itemsize,
offsets 64-aligned, increasing, not overlapping, inside the file), the entries' count
(<= 65536) and, while reading each payload, its CRC-32. A file that fails any check is
refused as InvalidInput naming the check, the variable and the file; nothing is restored.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Iterator, Mapping
from typing import BinaryIO

import numpy as np

from graphengine.engine.bounds import MAX_ELEMENTS, MAX_RANK
from graphengine.engine.errors import InvalidInput
from graphengine.engine.ops.variables import VARIABLE_DTYPES

MAGIC = b"GEVARS\x00\x01"
ALIGN = 64
MAX_HEADER_BYTES = 16 << 20
MAX_VARIABLES = 1 << 16
MAX_NAME = 4096
CHUNK = 1 << 20  # bytes read or checksummed at a time

__all__ = ["MAGIC", "read_checkpoint", "write_checkpoint", "checkpoint_chunks"]


def _bytes_of(a: np.ndarray) -> np.ndarray:
    """A C-contiguous array's bytes as a flat uint8 view (no copy)."""
    return a.reshape(-1).view(np.uint8)


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def checkpoint_chunks(values: Mapping[str, np.ndarray]) -> Iterator[bytes]:
    """The checkpoint of `values` (name -> C-contiguous array), piece by piece."""
    arrays = {name: np.asarray(a, order="C") for name, a in values.items()}
    entries = []
    for name, a in arrays.items():
        entries.append({"name": name, "dtype": a.dtype.name, "shape": list(a.shape),
                        "offset": 0, "nbytes": int(a.nbytes),
                        "crc32": zlib.crc32(_bytes_of(a))})
    # The offsets depend on the header's length, which depends on the offsets' digits:
    # lay out until it settles (twice at most in practice).
    header = b""
    while True:
        at = _align(16 + len(header) + 4)
        for e in entries:
            e["offset"] = at
            at = _align(at + e["nbytes"])
        encoded = json.dumps({"variables": entries}, separators=(",", ":")).encode()
        if len(encoded) == len(header):
            break
        header = encoded
    yield MAGIC + struct.pack("<Q", len(header)) + header + struct.pack("<I", zlib.crc32(header))
    written = 16 + len(header) + 4
    for e, a in zip(entries, arrays.values()):
        yield bytes(e["offset"] - written)
        data = _bytes_of(a)
        for i in range(0, len(data), CHUNK):
            yield data[i:i + CHUNK].tobytes()
        written = e["offset"] + e["nbytes"]


def write_checkpoint(f: BinaryIO, values: Mapping[str, np.ndarray]) -> int:
    """Writes the checkpoint of `values` to `f`; returns the bytes written."""
    total = 0
    for piece in checkpoint_chunks(values):
        f.write(piece)
        total += len(piece)
    return total


def _bad(source: str, what: str) -> InvalidInput:
    return InvalidInput(f"checkpoint {source} is not a valid graphengine checkpoint: {what}")


def _read_exactly(f: BinaryIO, n: int, source: str, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise _bad(source, f"it ends inside {what} ({len(data)} of {n} bytes)")
    return data


def _entries(raw: object, size: int, source: str) -> list[dict]:
    if not isinstance(raw, dict) or not isinstance(raw.get("variables"), list):
        raise _bad(source, "its header holds no list of variables")
    items = raw["variables"]
    if len(items) > MAX_VARIABLES:
        raise _bad(source, f"it lists {len(items)} variables, more than {MAX_VARIABLES}")
    names: set[str] = set()
    end = 0
    out = []
    for k, e in enumerate(items):
        where = f"entry {k}"
        if not isinstance(e, dict):
            raise _bad(source, f"{where} is not an object")
        name = e.get("name")
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME or \
                any(ord(c) < 32 for c in name):
            raise _bad(source, f"{where} has no valid name")
        where = f"variable '{name}'"
        if name in names:
            raise _bad(source, f"{where} appears twice")
        names.add(name)
        dtype = e.get("dtype")
        if dtype not in VARIABLE_DTYPES:
            raise _bad(source, f"{where} has dtype {str(dtype)[:40]!r}, not one of "
                               f"{', '.join(VARIABLE_DTYPES)}")
        shape = e.get("shape")
        if not isinstance(shape, list) or len(shape) > MAX_RANK or any(
                isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape) or \
                math.prod(max(d, 1) for d in shape) > MAX_ELEMENTS:
            raise _bad(source, f"{where} has an invalid shape (a list of at most {MAX_RANK} "
                               f"dims >= 0, at most {MAX_ELEMENTS} elements)")
        nbytes, offset, crc = e.get("nbytes"), e.get("offset"), e.get("crc32")
        want = math.prod(shape) * np.dtype(dtype).itemsize
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (nbytes, offset, crc)):
            raise _bad(source, f"{where} lacks an integer nbytes, offset or crc32")
        if nbytes != want:
            raise _bad(source, f"{where} says {nbytes} bytes; {dtype}{shape} holds {want}")
        if offset % ALIGN or offset < end or offset + nbytes > size:
            raise _bad(source, f"{where} lies at bytes [{offset}, {offset + nbytes}), which is "
                               f"unaligned, overlaps the previous one or passes the end of "
                               f"the file ({size} bytes)")
        if not 0 <= crc < 1 << 32:
            raise _bad(source, f"{where} has an invalid crc32")
        end = offset + nbytes
        out.append({"name": name, "dtype": np.dtype(dtype), "shape": tuple(shape),
                    "offset": offset, "nbytes": nbytes, "crc32": crc})
    return out


def read_header(f: BinaryIO, size: int, source: str) -> tuple[list[dict], int]:
    """The checked entries and the bytes of `f` read so far."""
    if size < 20:
        raise _bad(source, f"it is {size} bytes long, shorter than any checkpoint")
    head = _read_exactly(f, 16, source, "the file header")
    if head[:6] != MAGIC[:6]:
        raise _bad(source, f"it starts with {head[:8]!r}, a checkpoint with {MAGIC!r}")
    if head[6:8] != MAGIC[6:8]:
        raise _bad(source, f"format version {head[7]} (this build reads {MAGIC[7]})")
    (length,) = struct.unpack("<Q", head[8:16])
    if length > min(MAX_HEADER_BYTES, size - 20):
        raise _bad(source, f"its header claims {length} bytes (at most "
                           f"{min(MAX_HEADER_BYTES, size - 20)} here)")
    header = _read_exactly(f, length, source, "the header")
    (crc,) = struct.unpack("<I", _read_exactly(f, 4, source, "the header's checksum"))
    if zlib.crc32(header) != crc:
        raise _bad(source, "the header's checksum does not match (the file is damaged)")
    try:
        raw = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad(source, f"its header is not JSON ({exc})") from None
    return _entries(raw, size, source), 20 + length


def read_checkpoint(f: BinaryIO, size: int, source: str,
                    check: object = None) -> dict[str, np.ndarray]:
    """The variables of the checkpoint in `f` (`size` bytes long), each checked against its
    checksum; `check(entries)`, if given, sees the checked header before any payload is read
    (the session refuses there what does not fit). Raises InvalidInput for a bad file."""
    entries, at = read_header(f, size, source)
    if callable(check):
        check([(e["name"], e["dtype"], e["shape"]) for e in entries])
    values: dict[str, np.ndarray] = {}
    for e in entries:
        _read_exactly(f, e["offset"] - at, source, "the padding")
        arr = np.empty(e["shape"], e["dtype"])
        view = _bytes_of(arr)
        crc = 0
        for i in range(0, e["nbytes"], CHUNK):
            piece = _read_exactly(f, min(CHUNK, e["nbytes"] - i), source,
                                  f"variable '{e['name']}'")
            view[i:i + len(piece)] = np.frombuffer(piece, np.uint8)
            crc = zlib.crc32(piece, crc)
        if crc != e["crc32"]:
            raise _bad(source, f"variable '{e['name']}' fails its checksum (the file is "
                               f"damaged)")
        values[e["name"]] = arr
        at = e["offset"] + e["nbytes"]
    return values


