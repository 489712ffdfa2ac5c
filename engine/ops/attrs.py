"""Shorthands for attribute specs, so that schemas read like the ONNX operator tables."""

from __future__ import annotations

from typing import Any

from .registry import REQUIRED, AttrKind, AttrSpec


def i(default: Any = None) -> AttrSpec:
    return AttrSpec(AttrKind.INT, default)


def f(default: Any = None) -> AttrSpec:
    return AttrSpec(AttrKind.FLOAT, default)


def s(default: Any = None) -> AttrSpec:
    return AttrSpec(AttrKind.STRING, default)


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


__all__ = ["REQUIRED", "AttrKind", "AttrSpec", "f", "floats", "graph", "i", "ints", "s", "strings",
           "tensor"]
