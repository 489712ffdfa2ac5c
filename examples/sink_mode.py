"""Sink mode and session variables: N iterations of a graph in one call, with state kept on
the device between iterations and calls (GE's iterations_per_loop and variables).

    python examples/sink_mode.py

The graph adds each input row into a variable and returns the running total. In sink mode
an input with one more leading axis than the graph declares gives one slice per iteration;
one call runs them all (one native launch for a one-program model).
"""

from __future__ import annotations

import pathlib
import tempfile

import numpy as np

import graphengine
from graphengine import ops

g = graphengine.Graph("accumulate")
x = g.input("x", "float32", (4,))
total = g.variable("total", np.zeros(4, np.float32))  # lives in the session, not the graph
g.output(ops.AssignAdd(total, x), name="sum")  # the output: the variable after the write

rows = np.arange(12, dtype=np.float32).reshape(3, 4)  # 3 iterations of x: float32[4]

with graphengine.Session() as sess:
    gid = sess.add_graph(g)  # creates the variable "total" (zeros)

    last = sess.run_graph(gid, {"x": rows}, iterations=3)  # the last iteration's outputs
    print("after 3 iterations:", last["sum"])  # rows summed: [12. 15. 18. 21.]
    assert np.array_equal(last["sum"], rows.sum(axis=0))

    # return_all=True stacks every iteration's outputs on a new leading axis.
    every = sess.run_graph(gid, {"x": np.ones((2, 4), np.float32)}, iterations=2,
                           return_all=True)
    print("2 more, every iteration:", every["sum"].tolist())
    assert every["sum"].shape == (2, 4)

    # An input of the declared rank is reused by every iteration.
    sess.run_graph(gid, {"x": np.full(4, 10, np.float32)}, iterations=5)
    state = sess.get_variables()["total"]
    print("variable total:", state)  # 12+2+50 .. 21+2+50
    assert np.array_equal(state, rows.sum(axis=0) + 2 + 50)

    # Checkpoints: every variable at one consistent point, to a file and back.
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp, "state.ckpt")
        sess.save_checkpoint(path)
        sess.set_variables({"total": np.zeros(4, np.float32)})
        restored = sess.restore_checkpoint(path)
        print("restored", restored, "->", sess.get_variables()["total"])
        assert np.array_equal(sess.get_variables()["total"], state)
print("sink mode done")
