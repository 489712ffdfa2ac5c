"""Model importers: ONNX, TensorFlow frozen GraphDefs and the project's GraphDef wire IR,
behind one `load_model`."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx

from graphengine.tensorflow import graph_def_pb2 as tfpb
from graphengine.v1 import graph_pb2 as pb

from ..errors import InvalidModel
from ..gc_pause import paused
from ..ir import Graph
from .graphdef import (
    TEXT_SUFFIXES,
    export_graphdef,
    import_graphdef,
    read_graphdef_text,
    saved_graphdef,
)
from .onnx_import import import_onnx
from .onnx_wire import top_level_fields
from .tf_import import import_tf

# Top-level (field number, wire type) of the two file formats: ONNX's ModelProto starts
# with ir_version (1, varint) and holds its graph in field 7; TensorFlow's GraphDef holds
# nodes (1), library (2), version (3, varint), versions (4) and debug info (5).
_TF_FIELDS = {(1, 2), (2, 2), (3, 0), (4, 2), (5, 2)}


def model_format(model: bytes | bytearray | memoryview | str | os.PathLike) -> str | None:
    """"onnx", "tf" or None, from the bytes' top-level protobuf fields (nothing is parsed)."""
    if isinstance(model, (str, os.PathLike)):
        fields, problem = top_level_fields(path=model)
    else:
        fields, problem = top_level_fields(data=model)
    if (7, 2) in fields or fields[:1] == [(1, 0)]:
        return "onnx"  # a damaged ONNX file is reported by the ONNX importer, in its words
    if problem is None and (1, 2) in fields and set(fields) <= _TF_FIELDS:
        return "tf"
    return None


@paused
def load_model(model: Any, name: str | None = None, *,
               input_shapes: Mapping[str, Sequence[int]] | None = None,
               outputs: Sequence[str] | None = None) -> Graph:
    """A Graph from a Graph, a builder Graph (graphengine.Graph: a copy of its IR), GraphDef
    (or a file Graph.save wrote), onnx.ModelProto, a TensorFlow GraphDef (ours or
    tensorflow's message), or the bytes or path of an ONNX model or frozen TensorFlow graph.

    `input_shapes` and `outputs` apply to TensorFlow graphs (see tf_import.import_tf).
    """
    # A builder Graph exists only once its module is loaded: a path or bytes do not pay for
    # importing the builder (its op classes are made from the registry: ~12 ms, a tenth of a
    # small model's compile+load).
    builder = sys.modules.get(f"{__name__.rsplit('.', 1)[0]}.builder")

    if isinstance(model, Graph):
        return model
    if builder is not None and isinstance(model, builder.Graph):
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
    is_tf_message = isinstance(model, tfpb.GraphDef) or \
        getattr(getattr(model, "DESCRIPTOR", None), "full_name", "") == "tensorflow.GraphDef"
    if isinstance(model, onnx.ModelProto):
        kind = "onnx"
    elif is_tf_message:
        kind = "tf"
    elif isinstance(model, (bytes, bytearray, memoryview, str, os.PathLike)):
        what = "bytes are"
        if isinstance(model, (str, os.PathLike)):
            path = Path(model)
            if not path.is_file():
                raise InvalidModel(f"model file '{path}' does not exist")
            what = f"'{path.name}' is"
        kind = model_format(model)
        if kind is None:
            raise InvalidModel(f"{what} not an ONNX model or TensorFlow GraphDef")
    else:
        raise InvalidModel(f"cannot load a model from a {type(model).__name__}")
    if kind == "tf":
        return import_tf(model, name or _stem(model), input_shapes=input_shapes,
                         outputs=outputs)
    if outputs:
        raise InvalidModel("choosing the outputs applies to TensorFlow graphs; an ONNX "
                           "model declares its own")
    return import_onnx(model, name)


def _stem(model: Any) -> str | None:
    return Path(model).stem if isinstance(model, (str, os.PathLike)) else None


__all__ = ["export_graphdef", "import_graphdef", "import_onnx", "import_tf", "load_model",
           "model_format", "read_graphdef_text", "saved_graphdef"]
