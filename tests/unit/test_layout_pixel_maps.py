"""An elementwise op broadcasting a per-pixel map [N, 1, H, W] over the channels (a GLPN
decoder's x * attention[:, 0:1]) runs in an NHWC region: one channel has the same bytes
plain and NHWC, and the runtime's binary kernel reads it broadcast over the stored
channels. Before, the op took plain operands only, and each decoder stage left the region
and came back (two full-size TransData)."""

import pytest

from graphengine import _runtime
from tests.unit.test_layout_backwards import _gated_concat, _gated_decoder
from tests.unit.test_layout_pad import _compile_and_check


def _conversions(prog) -> list[tuple[int, ...]]:
    """Shapes the TransData tasks convert but the image (into the region) and the output (out
    of it)."""
    return [tuple(prog.tensors[t.inputs[0]].shape) for t in prog.tasks if t.op == "TransData"
            and prog.tensors[t.inputs[0]].shape[1] != 3 and t.outputs[0] not in prog.outputs]


def test_kernel_info_offers_nhwc_to_a_pixel_map_only():
    fmt = _runtime.kernel_info("Mul", ["float32"] * 2, [[2, 8, 5, 5], [2, 1, 5, 5]], {})
    assert fmt["supported"] and "nhwc" in fmt["formats"], fmt
    row = _runtime.kernel_info("Mul", ["float32"] * 2, [[2, 8, 5, 5], [2, 1, 1, 5]], {})
    assert row["formats"] == ["nchw"], row


@pytest.mark.parametrize("channels,size", [(5, 8), (16, 8), (32, 24)])  # 32: oneDNN's binary
@pytest.mark.parametrize("batch", [1, 3])
def test_gating_by_a_pixel_map_stays_in_the_region(channels, size, batch):
    """The gating Mul reads and writes NHWC (its map a view), so the decoder runs in the
    region from the first conv to the head: the only conversion inside is the two-channel
    attention's, into its channel Slice; outputs equal onnxruntime's."""
    model = _gated_decoder(channels, batch, 2.0, rows=False, size=size)
    prog = _compile_and_check(model, "nhwc", batch, hw=(size, size))
    (mul,) = [t for t in prog.tasks if t.op == "Mul"]
    assert [prog.tensors[i].format for i in (*mul.inputs, *mul.outputs)] == ["nhwc"] * 3
    assert _conversions(prog) == [(batch, 2, size, size)], _conversions(prog)


@pytest.mark.parametrize("batch", [1, 2])
def test_gated_concat_stays_in_the_region(batch):
    """Both gating Muls (one reading a pooled map) and the Concat run NHWC: no conversion
    inside the region; outputs equal onnxruntime's."""
    prog = _compile_and_check(_gated_concat(6, batch, rows=False), "nhwc", batch, hw=(8, 8))
    muls = [t for t in prog.tasks if t.op == "Mul"]
    assert len(muls) == 2 and all(prog.tensors[t.outputs[0]].format == "nhwc" for t in muls)
    assert _conversions(prog) == [], _conversions(prog)

