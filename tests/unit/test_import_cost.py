"""What a cold import, compile and load must not pay: modules imported lazily inside them
(bench-zoo times add_graph + compile + first run in a fresh process, the engine imported
first), and the text check's map handling that used to import one."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from graphengine.engine.errors import InvalidModel
from graphengine.engine.importers.graphdef import import_graphdef
from graphengine.v1 import graph_pb2 as pb

_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    import graphengine
    from graphengine.engine.runtime import default_device

    w = numpy_helper.from_array(np.ones((4, 4, 3, 3), np.float32), "w")
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [1, -1])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Constant", [], ["shape"], value=shape),
             helper.make_node("Reshape", ["r", "shape"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[w])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]
                             ).SerializeToString()
    session = graphengine.Session(device=default_device(2))
    before = set(sys.modules)
    gid = session.add_graph(data)
    session.compile_graph(gid, {"x": (1, 4, 8, 8)})
    out = session.run_graph(gid, {"x": np.ones((1, 4, 8, 8), np.float32)})
    assert next(iter(out.values())).shape == (1, 256)
    print(sorted(set(sys.modules) - before))
""")


def test_a_cold_add_compile_and_run_import_no_module():
    # google.protobuf.descriptor_pb2 (the text check asked a map entry type for its
    # options: 3-6 ms) and encodings.ascii (/proc/cpuinfo read as "ascii") were imported
    # inside the first model's import and load.
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_map_key_too_long_to_be_a_name_is_still_refused():
    gd = pb.GraphDef(name="g")
    node = gd.nodes.add(name="n", op_type="Relu", inputs=["x"], outputs=["y"])
    node.attrs["k" * 5000].i = 1
    with pytest.raises(InvalidModel, match="a key of 'attrs' has 5000 characters"):
        import_graphdef(gd)
