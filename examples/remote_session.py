"""A session on a server: graphengine.Client speaks the in-process Session's methods over
gRPC.

    python examples/remote_session.py                    # starts a server of its own
    python examples/remote_session.py --server HOST:PORT # or uses yours (`make run`)

The server holds the session (its graphs, compiled models and device memory) until it is
closed, or idle for `session_idle_seconds`.
"""

from __future__ import annotations

import argparse
import contextlib

import numpy as np

from graphengine import errors
from graphengine.clients import Client

from local_server import LocalServer
from make_examples import build_mlp, reference


def main(address: str) -> None:
    model = build_mlp(batch="batch")
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    with Client(address, timeout=60) as client:
        print("server health:", client.health())  # grpc.health.v1: SERVING
        with client.session({"max_streams": 2}) as sess:  # SessionOptions, as a mapping
            gid = sess.add_graph(model)  # the model's bytes travel in AddGraph
            report = sess.compile_graph(gid, {"input": [2, 64]})
            print("compiled:", report.nodes_before, "->", report.nodes_after, "nodes,",
                  report.tasks, "tasks")
            y = sess.run_graph(gid, {"input": x})["output"]
            assert np.allclose(y, reference(model, x), atol=1e-4)
            print("run_graph:", y.shape)

            # Many runs in flight: futures, or one bidirectional stream.
            futures = [sess.run_graph_async(gid, {"input": x * i}) for i in range(4)]
            print("run_graph_async:", [f.result()["output"].shape for f in futures])
            answers = sess.run_graph_stream(gid, ((f"r{i}", {"input": x}) for i in range(3)))
            print("run_graph_stream:", sorted(a.request_id for a in answers))

            # The server's errors arrive as the same classes the in-process Session raises,
            # with the graph, node or tensor at fault.
            try:
                sess.run_graph(gid, {"input": x.astype(np.float64)})
            except errors.InvalidArgument as exc:
                print("refused:", exc.message, "| tensor:", exc.tensor)
            session_id = sess.id
        try:  # the session is gone once closed
            client.attach(session_id).graph_info(gid)
        except errors.NotFound as exc:
            print("after close:", exc.code.name)
    print("remote session done")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", help="HOST:PORT of a running server (default: start one)")
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        address = args.server or stack.enter_context(LocalServer()).grpc
        main(address)
