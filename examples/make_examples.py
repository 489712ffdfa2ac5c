"""Write the example model and its input: `python examples/make_examples.py DIR`.

DIR/mlp.onnx        input "input" float32[1,64] -> Gemm -> Relu -> Gemm -> "output" [1,10]
DIR/mlp_input.npz   one array under the key "input"

Weights and input are seeded, so every run writes the same files. Then, with a server
running (`graphengine serve`):

    graphengine run --server 127.0.0.1:50051 DIR/mlp.onnx \\
        --input DIR/mlp_input.npz --output /tmp/out.npz
"""

from __future__ import annotations

import argparse
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IN_FEATURES, HIDDEN, OUT_FEATURES = 64, 32, 10


def build_mlp(seed: int = 0, batch: int | str = 1) -> onnx.ModelProto:
    """The MLP; `batch` is the first dim of input and output: a size, or a symbol ("batch")
    that the compiler binds per run (or ahead, for gears)."""
    rng = np.random.default_rng(seed)
    # Scaled like a usual initialiser so that activations stay in a readable range.
    w1 = (rng.standard_normal((IN_FEATURES, HIDDEN)) / np.sqrt(IN_FEATURES)).astype(np.float32)
    b1 = (rng.standard_normal(HIDDEN) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((HIDDEN, OUT_FEATURES)) / np.sqrt(HIDDEN)).astype(np.float32)
    b2 = (rng.standard_normal(OUT_FEATURES) * 0.1).astype(np.float32)
    graph = helper.make_graph(
        nodes=[
            helper.make_node("Gemm", ["input", "w1", "b1"], ["hidden"], name="fc1"),
            helper.make_node("Relu", ["hidden"], ["hidden_relu"], name="relu1"),
            helper.make_node("Gemm", ["hidden_relu", "w2", "b2"], ["output"], name="fc2"),
        ],
        name="mlp",
        inputs=[helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                              [batch, IN_FEATURES])],
        outputs=[helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                               [batch, OUT_FEATURES])],
        initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
                     numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(b2, "b2")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="graphengine-examples")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """What the MLP computes, in numpy: relu(x @ w1 + b1) @ w2 + b2."""
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return np.maximum(x @ w["w1"] + w["b1"], 0) @ w["w2"] + w["b2"]


def make_input(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, IN_FEATURES)).astype(np.float32)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=pathlib.Path, help="directory to write the files into")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    onnx.save(build_mlp(), args.dir / "mlp.onnx")
    np.savez(args.dir / "mlp_input.npz", input=make_input())
    print(f"wrote {args.dir / 'mlp.onnx'} and {args.dir / 'mlp_input.npz'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
