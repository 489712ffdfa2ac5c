"""Byte-level mutations shared by the serialized-input fuzz tests."""

from __future__ import annotations

from hypothesis import strategies as st


@st.composite
def mutated_bytes(draw, data: bytes) -> bytes:
    """`data` with 1-3 of: bit flips, a truncation, a byte run inserted, deleted, overwritten
    or repeated, or an interesting value (0x00/0xff/0x7f/0x80 runs, a huge varint) written in."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        n = len(buf)
        how = draw(st.sampled_from(["flip", "flip", "truncate", "insert", "delete", "overwrite",
                                    "repeat", "varint"]))
        at = draw(st.integers(0, max(0, n - 1)))
        if how == "flip" and n:
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif how == "truncate":
            del buf[draw(st.integers(0, n)):]
        elif how == "insert":
            buf[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif how == "delete":
            del buf[at:at + draw(st.integers(1, 16))]
        elif how == "overwrite" and n:
            chunk = draw(st.binary(min_size=1, max_size=8)
                         | st.sampled_from([b"\x00" * 4, b"\xff" * 8, b"\x7f", b"\x80"]))
            buf[at:at + len(chunk)] = chunk
        elif how == "repeat" and n:
            size = draw(st.integers(1, 64))
            buf[at:at] = buf[at:at + size] * draw(st.integers(1, 4))
        elif how == "varint":
            buf[at:at] = b"\xff" * 9 + b"\x01"
    return bytes(buf)
