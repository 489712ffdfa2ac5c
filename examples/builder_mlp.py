"""The graph construction API: graphengine.Graph and graphengine.ops build an MLP op by op.

    python examples/builder_mlp.py

Shapes and dtypes are inferred as each op is added; a mistake fails at the call that makes
it. The graph is compiled ahead for three batch sizes (gears) and saved to a file that
`add_graph(path)` and `graphengine compile` read back.
"""

from __future__ import annotations

import pathlib
import tempfile

import numpy as np

import graphengine
from graphengine import errors, ops

rng = np.random.default_rng(0)
w1 = (rng.standard_normal((64, 32)) / 8).astype(np.float32)
w2 = (rng.standard_normal((32, 10)) / 6).astype(np.float32)

g = graphengine.Graph("mlp")
x = g.input("x", "float32", ("batch", 64))  # dims: ints or symbols
h = ops.Relu(ops.Gemm(x, w1, np.zeros(32, np.float32)))  # numpy arrays become constants
logits = h @ w2  # Tensor arithmetic adds ops too: @ is MatMul, + is Add, ...
probs = g.output(ops.Softmax(logits, axis=-1), name="probs")
print("probs:", probs.dtype, probs.shape)  # float32 ('batch', 10), known before compiling

try:  # mistakes are refused at the call, naming the op
    ops.Softmax(logits, axes=-1)
except errors.InvalidArgument as exc:
    print("refused:", exc)

with graphengine.Session() as sess:
    # gears: batch sizes compiled ahead; a run takes the smallest gear that holds it
    # (padded, outputs sliced back); larger batches run in chunks.
    gid = sess.add_graph(g, gears=[1, 4, 16])
    sess.compile_graph(gid)  # every gear now, so no run waits for a compile
    print("gears:", sess.graph_info(gid).gears, "loaded models:", sess.loaded_models)
    batch = rng.standard_normal((3, 64)).astype(np.float32)
    p = sess.run_graph(gid, {"x": batch})["probs"]  # served by the gear of 4
    want = np.exp(np.maximum(batch @ w1, 0) @ w2)
    want /= want.sum(axis=1, keepdims=True)
    assert p.shape == (3, 10) and np.allclose(p, want, atol=1e-5)
    print("batch 3 ->", p.shape, "rows sum to", p.sum(axis=1).round(5))

with tempfile.TemporaryDirectory() as tmp, graphengine.Session() as sess:
    path = pathlib.Path(tmp) / "mlp.pbtxt"  # .pbtxt: the text form; other names: binary
    g.save(path)
    print(path.read_text().splitlines()[0], "...")
    gid = sess.add_graph(str(path))
    again = sess.run_graph(gid, {"x": batch})["probs"]
    assert np.allclose(again, p, atol=1e-6)
    print("saved and reloaded: same probabilities")
