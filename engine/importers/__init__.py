"""Model importers: ONNX and the project's GraphDef wire IR, behind one `load_model`."""

from __future__ import annotations

import os
from typing import Any

import onnx

from graphengine.v1 import graph_pb2 as pb

from ..errors import InvalidModel
from ..ir import Graph
from .graphdef import (
    TEXT_SUFFIXES,
    export_graphdef,
    import_graphdef,
    read_graphdef_text,
    saved_graphdef,
)
from .onnx_import import import_onnx


def load_model(model: Any, name: str | None = None) -> Graph:
    """A Graph from a Graph, a builder Graph (graphengine.Graph: a copy of its IR), GraphDef,
    onnx.ModelProto, ONNX bytes or an .onnx file path."""
    from ..builder import Graph as BuilderGraph

    if isinstance(model, Graph):
        return model
    if isinstance(model, BuilderGraph):
        g = model.to_ir()
        if name:
            g.name = name
        return g
    if isinstance(model, pb.GraphDef):
        g = import_graphdef(model)
        if name:
            g.name = name
        return g
    if isinstance(model, (str, os.PathLike)) and str(model).endswith(TEXT_SUFFIXES):
        return load_model(read_graphdef_text(model), name)
    if isinstance(model, (bytes, bytearray, memoryview, str, os.PathLike)):
        gd = saved_graphdef(model)  # what graphengine.Graph.save wrote, or None
        if gd is not None:
            return load_model(gd, name)
    if isinstance(model, (onnx.ModelProto, bytes, bytearray, memoryview, str, os.PathLike)):
        return import_onnx(model, name)
    raise InvalidModel(f"cannot load a model from a {type(model).__name__}")


__all__ = ["export_graphdef", "import_graphdef", "import_onnx", "load_model",
           "read_graphdef_text", "saved_graphdef"]
