"""Shorthands for attribute specs, so that schemas read like the ONNX operator tables."""

from __future__ import annotations

from typing import Any

from .registry import REQUIRED, AttrKind, AttrSpec

# the padding rules of convolutions and pools
AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
# the directions of recurrent layers
DIRECTIONS = ("forward", "reverse", "bidirectional")


def i(default: Any = None) -> AttrSpec:
    return AttrSpec(AttrKind.INT, default)


def f(default: Any = None) -> AttrSpec:
    return AttrSpec(AttrKind.FLOAT, default)


def s(default: Any = None, choices: tuple[str, ...] | None = None) -> AttrSpec:
    return AttrSpec(AttrKind.STRING, default, choices)


def ints(default: Any = None) -> AttrSpec:
    return AttrSpec(AttrKind.INTS, default)


def floats(default: Any = None) -> AttrSpec:
    return AttrSpec(AttrKind.FLOATS, default)


def strings(default: Any = None) -> AttrSpec:
    return AttrSpec(AttrKind.STRINGS, default)


def tensor(default: Any = None) -> AttrSpec:
    return AttrSpec(AttrKind.TENSOR, default)


def graph(default: Any = REQUIRED) -> AttrSpec:
    return AttrSpec(AttrKind.GRAPH, default)


__all__ = ["AUTO_PAD", "DIRECTIONS", "REQUIRED", "AttrKind", "AttrSpec", "f", "floats", "graph",
           "i", "ints", "s", "strings", "tensor"]
