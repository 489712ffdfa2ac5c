"""A mixture-of-experts layer sent to the real server: compiled into one device program (the
experts' selections bounded by the token count, prepare/expert_rows.py), its compile report
saying so over the wire, and its outputs onnxruntime's."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from graphengine.clients import Client
from tests.unit.test_expert_rows import E, _feeds, hit_list_moe


def test_served_mixture_of_experts_runs_on_the_device(server: str) -> None:
    model = hit_list_moe(k=2, seed=0)
    with Client(server, timeout=120) as client, client.session() as sess:
        gid = sess.add_graph(model)
        report = sess.compile_graph(gid)
        assert [p.engine for p in report.partitions] == ["device"], report.render()
        detail = " ".join(p.detail for p in report.passes if p.name == "bound_expert_selections")
        assert f"{E} expert selections bounded" in detail
        ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        for seed in (1, 2):
            feeds = _feeds(seed)
            got = sess.run_graph(gid, feeds)["out"]
            np.testing.assert_allclose(got, ref.run(["out"], feeds)[0], rtol=1e-5, atol=1e-5)
