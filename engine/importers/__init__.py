"""Model importers: ONNX and the project's GraphDef wire IR, behind one `load_model`."""

from __future__ import annotations

import os
from typing import Any

import onnx

from graphengine.v1 import graph_pb2 as pb

from ..errors import InvalidModel
from ..ir import Graph
from .graphdef import export_graphdef, import_graphdef
from .onnx_import import import_onnx


def load_model(model: Any, name: str | None = None) -> Graph:
    """A Graph from a Graph, GraphDef, onnx.ModelProto, ONNX bytes or an .onnx file path."""
    if isinstance(model, Graph):
        return model
    if isinstance(model, pb.GraphDef):
        g = import_graphdef(model)
        if name:
            g.name = name
        return g
    if isinstance(model, (onnx.ModelProto, bytes, bytearray, memoryview, str, os.PathLike)):
        return import_onnx(model, name)
    raise InvalidModel(f"cannot load a model from a {type(model).__name__}")


__all__ = ["export_graphdef", "import_graphdef", "import_onnx", "load_model"]
