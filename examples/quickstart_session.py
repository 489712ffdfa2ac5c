"""The in-process API: a graphengine.Session compiles an ONNX model and runs it.

    python examples/quickstart_session.py

No server: the session is the same class the server runs for each client. The model is the
MLP of make_examples.py (Gemm -> Relu -> Gemm), with a symbolic batch dimension.
"""

from __future__ import annotations

import numpy as np

import graphengine
from graphengine import errors

from make_examples import build_mlp, reference

model = build_mlp(batch="batch")  # an onnx.ModelProto; a path or its bytes work too

with graphengine.Session() as sess:
    graph_id = sess.add_graph(model)  # stage 0: import, validate, infer shapes
    info = sess.graph_info(graph_id)
    print("inputs:", [(t.name, t.shape) for t in info.inputs])  # [('input', ('batch', 64))]

    # Stages 1-5 (prepare, partition, optimize, build, load) for batch 4; the report says
    # what each pass did, where each node runs, what was fused and the memory plan.
    report = sess.compile_graph(graph_id, {"input": [4, 64]})
    print(report.render())

    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    out = sess.run_graph(graph_id, {"input": x})  # stage 6: execute; {name: array}
    y = out["output"]
    print("output", y.shape, y.dtype)

    # A batch the graph was not compiled for compiles on first use (then is cached).
    y7 = sess.run_graph(graph_id, {"input": np.ones((7, 64), np.float32)})["output"]
    print("batch 7 ->", y7.shape, "| compiled signatures:",
          sess.graph_info(graph_id).compiled_signatures)

    error = float(np.abs(y - reference(model, x)).max())
    assert error < 1e-4, error
    print(f"matches numpy (largest difference {error:.1e})")

    # Errors are graphengine.errors classes, naming what is wrong.
    try:
        sess.run_graph(graph_id, {"input": np.ones((4, 63), np.float32)})
    except errors.InvalidArgument as exc:
        print("refused:", exc.message)
