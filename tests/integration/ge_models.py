"""Models the integration tests send: ONNX built with onnx.helper, GraphDefs built by hand."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine import wire
from graphengine.v1 import graph_pb2 as pb


def mlp_onnx(batch: int | str = 2, features: int = 16, hidden: int = 32, classes: int = 5,
             seed: int = 0) -> onnx.ModelProto:
    """x[batch, features] -> MatMul+Add -> Relu -> Gemm(transB) -> Sigmoid -> y[batch, classes]."""
    rng = np.random.default_rng(seed)
    # Cast last: numpy scalars like np.sqrt(16) would promote float32 arrays to float64.
    w1 = (rng.standard_normal((features, hidden)) / np.sqrt(features)).astype(np.float32)
    b1 = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((classes, hidden)) / np.sqrt(hidden)).astype(np.float32)
    b2 = (rng.standard_normal(classes) * 0.1).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1_matmul"),
         helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
         helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
         helper.make_node("Gemm", ["h2", "w2", "b2"], ["logits"], name="fc2", transB=1),
         helper.make_node("Sigmoid", ["logits"], ["y"], name="sigmoid")],
        "test_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, classes])],
        initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
                     numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(b2, "b2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def offset_onnx(offset: float, features: int = 4, batch: int | str = "batch"
                ) -> onnx.ModelProto:
    """x[batch, features] -> y = x + offset, z = x * offset: which model answered shows in
    the numbers (the repository tests give each version its own offset)."""
    c = numpy_helper.from_array(np.array([offset], np.float32), "c")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["y"], name="add"),
         helper.make_node("Mul", ["x", "c"], ["z"], name="mul")],
        f"offset_{offset:g}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, features]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, features])],
        initializer=[c])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def _desc(name: str, shape: list[int] | None = None) -> pb.TensorDesc:
    return pb.TensorDesc(name=name, dtype=pb.DT_FLOAT32,
                         shape=[pb.Dim(size=d) for d in (shape or [])])


def _node(name: str, op: str, inputs: list[str], outputs: list[str]) -> pb.NodeDef:
    return pb.NodeDef(name=name, op_type=op, inputs=inputs, outputs=outputs)


SCALE = np.array([0.5, -1.0, 2.0], dtype=np.float32)


def simple_graphdef() -> pb.GraphDef:
    """input_a, input_b: f32[2,3]; sum = a + b; out = relu(sum * SCALE); outputs (out, sum)."""
    return pb.GraphDef(
        name="handmade",
        inputs=[_desc("input_a", [2, 3]), _desc("input_b", [2, 3])],
        outputs=[_desc("out"), _desc("sum")],
        nodes=[_node("add_node", "Add", ["input_a", "input_b"], ["sum"]),
               _node("scale_node", "Mul", ["sum", "scale"], ["scaled"]),
               _node("relu_node", "Relu", ["scaled"], ["out"])],
        constants=[wire.tensor_to_pb("scale", SCALE)],
    )


def simple_expected(a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    s = a + b
    return {"out": np.maximum(s * SCALE, 0), "sum": s}


def cycle_graphdef() -> pb.GraphDef:
    """cycle_add reads cycle_relu's output, which reads cycle_add's."""
    return pb.GraphDef(
        name="cyclic",
        inputs=[_desc("x", [2, 3])], outputs=[_desc("b")],
        nodes=[_node("cycle_add", "Add", ["x", "b"], ["a"]),
               _node("cycle_relu", "Relu", ["a"], ["b"])],
    )


def unknown_op_graphdef() -> pb.GraphDef:
    return pb.GraphDef(
        name="mystery",
        inputs=[_desc("x", [2, 3])], outputs=[_desc("y")],
        nodes=[_node("mystery_node", "NoSuchOp", ["x"], ["y"])],
    )


def dangling_input_graphdef() -> pb.GraphDef:
    return pb.GraphDef(
        name="dangling",
        inputs=[_desc("x", [2, 3])], outputs=[_desc("y")],
        nodes=[_node("reader_node", "Add", ["x", "ghost_tensor"], ["y"])],
    )
