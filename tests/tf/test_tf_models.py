"""Frozen Keras models (tests/tf/make_models.py, run by `make test-tf` with TensorFlow)
imported from their .pb files and run through graphengine.Session, compared with
TensorFlow's outputs.

Tolerance: float32 through ~50-150 layers of random-weight convolutions, computed by two
different convolution implementations (oneDNN's, in different formats and orders of
summation): the worst element may differ by 1e-4 of the output's scale (max |TF output|),
and softmax outputs (probabilities) by 1e-5 absolute. Where the models' files are missing
(a plain `make test`) the tests are skipped and say so.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import graphengine
from graphengine.engine.importers import load_model

MODELS = Path(os.environ.get("GE_TF_MODELS", Path(__file__).resolve().parents[2]
                             / "build" / "tf_models"))
NAMES = ["mobilenet_v2", "resnet50", "efficientnet_b0", "densenet121", "inception_v3",
         "mobilenet_v3_small", "small_cnn", "mlp_seq"]
REL_TOL = 1e-4


def _case(name: str) -> tuple[Path, dict[str, np.ndarray], dict[str, np.ndarray]]:
    pb = MODELS / f"{name}.pb"
    if not pb.exists():
        pytest.skip(f"{pb} is missing: `make test-tf` freezes the models with TensorFlow")
    arrays = np.load(MODELS / f"{name}.npz")
    inputs = {k[3:]: arrays[k] for k in arrays.files if k.startswith("in:")}
    outputs = {k[4:]: arrays[k] for k in arrays.files if k.startswith("out:")}
    return pb, inputs, outputs


def _close(got: np.ndarray, want: np.ndarray) -> float:
    """The worst difference relative to the output's scale."""
    assert got.shape == want.shape and got.dtype == want.dtype
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-6))


@pytest.mark.parametrize("name", NAMES)
def test_frozen_keras_model_matches_tensorflow(name: str) -> None:
    pb, inputs, want = _case(name)
    with graphengine.Session() as sess:
        gid = sess.add_graph(str(pb))
        info = sess.graph_info(gid)
        assert [t.name for t in info.inputs] == sorted(inputs)
        assert all(isinstance(t.shape[0], str) for t in info.inputs)  # TF's None batch
        got = sess.run_graph(gid, inputs)
    assert sorted(got) == sorted(want)
    for key in want:
        assert _close(got[key], want[key]) < REL_TOL, key


def test_batch_is_symbolic_and_other_batches_run() -> None:
    pb, inputs, want = _case("small_cnn")
    one = {k: v[:1] for k, v in inputs.items()}
    with graphengine.Session() as sess:
        gid = sess.add_graph(str(pb))
        got = sess.run_graph(gid, one)
    for key in want:
        assert _close(got[key], want[key][:1]) < REL_TOL


def test_layouts_leave_no_transpose_between_convolutions() -> None:
    """The importer keeps NCHW between convolutions: what is left of TensorFlow's NHWC is
    the input's transpose and the formats the layout pass chose."""
    pb, _, _ = _case("resnet50")
    g = load_model(str(pb))
    transposes = [n for n in g.nodes if n.op_type == "Transpose"]
    assert len(transposes) == 1 and transposes[0].inputs[0] is g.inputs[0]
