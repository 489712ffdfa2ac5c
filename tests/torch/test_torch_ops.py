"""Single ATen ops through the backend: each small module compiles whole (no fallback) and
matches eager torch; the report says what ran where."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="needs torch (make test-torch)")
import torch.nn.functional as F  # noqa: E402

import graphengine.torch as gt  # noqa: E402

X = (2, 4, 6, 6)
CASES = {
    "conv_bn_relu": (lambda: torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1),
                                                 torch.nn.BatchNorm2d(8), torch.nn.ReLU()), X),
    "conv_transpose": (lambda: torch.nn.ConvTranspose2d(4, 3, 3, stride=2), X),
    "linear_gelu_silu": (lambda: torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU(),
                                                     torch.nn.SiLU()), X),
    "layer_norm_softmax": (lambda: _F(lambda x: F.layer_norm(x, (6,)).softmax(-1)), X),
    "log_softmax_tanh": (lambda: _F(lambda x: F.log_softmax(torch.tanh(x), 1)), X),
    "group_norm": (lambda: torch.nn.GroupNorm(2, 4), X),
    "pools": (lambda: _F(lambda x: F.max_pool2d(x, 2) + F.avg_pool2d(x, 2)
                         + F.adaptive_avg_pool2d(x, 3)), X),
    "ceil_pool": (lambda: torch.nn.MaxPool2d(3, 2, ceil_mode=True), (1, 2, 8, 8)),
    "arith": (lambda: _F(lambda x: (x * 2 - 1) / (x.abs() + 1) + x.pow(2) + torch.rsqrt(
        x.abs() + 1) + torch.exp(-x).sqrt() + torch.where(x > 0, x, -x)), X),
    "reductions": (lambda: _F(lambda x: x.mean((2, 3)) + x.sum(-1).amax(-1)
                              + x.amin((2, 3))), X),
    "views": (lambda: _F(lambda x: x.permute(0, 2, 3, 1).reshape(2, -1, 4).transpose(1, 2)
                         .unsqueeze(1).squeeze(1).expand(2, 4, 36).contiguous()), X),
    "cat_slice_select": (lambda: _F(lambda x: torch.cat([x[:, 1:3], x[:, :, ::2].repeat(
        1, 1, 2, 1)[:, :2, :6]], 1)[:, :, 1] + x.select(3, 2)[:, :4]), X),
    "compare_cumsum": (lambda: _F(lambda x: (x > 0).float().cumsum(-1) + (x <= 0.5).int()
                                  + (x == x).long()), X),
    "constants": (lambda: _F(lambda x: x + torch.arange(6.0) + torch.ones(6) * 3
                             + torch.full((6,), 0.5)), X),
    "pad_flip_tril": (lambda: _F(lambda x: F.pad(x, (1, 2, 0, 1), value=0.5).flip(-1)
                                 .tril()), X),
    "clamp_hard": (lambda: _F(lambda x: F.hardtanh(x) + F.hardswish(x) + F.hardsigmoid(x)
                              + x.clamp(-0.5, 0.7) + F.leaky_relu(x, 0.1) + F.elu(x)), X),
    "sdpa": (lambda: _F(lambda x: F.scaled_dot_product_attention(x, x, x, is_causal=True)),
             X),
    "split_chunk": (lambda: _F(lambda x: x.chunk(2, 1)[1] * x.split([1, 3], 1)[1][:, :2]), X),
}


class _F(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_compiles_whole_and_matches_eager(case: str) -> None:
    make, shape = CASES[case]
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(shape)
    backend = gt.backend()
    with torch.no_grad():
        want = model(x)
        got = torch.compile(model, backend=backend)(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    (report,) = backend.reports
    assert report.fallbacks == [], report.summary()
    assert report.fully_compiled and len(report.partitions) == 1
    backend.close()


def test_embedding_and_gather_of_int_inputs() -> None:
    emb = torch.nn.Embedding(50, 8).eval()
    ids = torch.randint(0, 50, (3, 7))
    backend = gt.backend()
    with torch.no_grad():
        got = torch.compile(lambda i: emb(i).sum(1) + emb.weight[i[:, 0]], backend=backend)(ids)
        want = emb(ids).sum(1) + emb.weight[ids[:, 0]]
    torch.testing.assert_close(got, want)
    assert backend.reports[0].fully_compiled
