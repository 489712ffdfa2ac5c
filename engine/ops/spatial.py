"""Window geometry shared by convolution and pooling: auto_pad, output sizes, windows."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..ir import Dim, Node
from .registry import shape_error
from .shape_helpers import sym


@dataclasses.dataclass(frozen=True)
class Window:
    """Resolved window parameters for n spatial dims; pads are [begins..., ends...]."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]

    @property
    def n(self) -> int:
        return len(self.kernel)

    def extent(self, i: int) -> int:
        return (self.kernel[i] - 1) * self.dilations[i] + 1


def window(node: Node | None, a: dict[str, Any], kernel: Sequence[int],
           spatial: Sequence[Dim], ceil_mode: bool = False) -> tuple[Window, tuple[Dim, ...]]:
    """Resolve auto_pad/pads and compute the output spatial sizes (symbols when unknown)."""
    n = len(kernel)
    strides = tuple(a.get("strides") or [1] * n)
    dilations = tuple(a.get("dilations") or [1] * n)
    pads = list(a.get("pads") or [0] * (2 * n))
    if len(strides) != n or len(dilations) != n or len(pads) != 2 * n:
        _fail(node, f"strides/dilations/pads have lengths {len(strides)}/{len(dilations)}/"
                    f"{len(pads)}, expected {n}/{n}/{2 * n} for kernel {list(kernel)}")
    auto = a.get("auto_pad", "NOTSET")
    kernel = list(kernel)
    outs: list[Dim] = []
    for i in range(n):
        size = spatial[i]
        ext = (kernel[i] - 1) * dilations[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            if not isinstance(size, int):
                outs.append(sym(node, i + 2) if node else -1)
                continue
            o = -(-size // strides[i])
            total = max((o - 1) * strides[i] + ext - size, 0)
            small, big = total // 2, total - total // 2
            pads[i], pads[i + n] = (small, big) if auto == "SAME_UPPER" else (big, small)
            outs.append(o)
            continue
        if auto == "VALID":
            pads[i] = pads[i + n] = 0
        if not isinstance(size, int):
            outs.append(sym(node, i + 2) if node else -1)
            continue
        span = size + pads[i] + pads[i + n] - ext
        if span < 0 and ceil_mode and -span < strides[i] and dilations[i] == 1:
            # A window larger than the padded input that ceil mode still counts once (HF
            # EfficientNet's AvgPool2d(640, ceil_mode=True) over a 4x4 map): clipped to the
            # padded input, as torch and ONNX Runtime compute it (their average divides by
            # the clipped window), so it is that window.
            kernel[i] = ext = size + pads[i] + pads[i + n]
            span = 0
        if span < 0:
            _fail(node, f"window extent {ext} exceeds padded input size "
                        f"{size + pads[i] + pads[i + n]} on spatial dim {i}")
        if ceil_mode:
            o = -(-span // strides[i]) + 1
            if (o - 1) * strides[i] >= size + pads[i]:
                o -= 1  # the last window would start in the end padding
        else:
            o = span // strides[i] + 1
        outs.append(o)
    return Window(tuple(kernel), strides, dilations, tuple(pads)), tuple(outs)


def _fail(node: Node | None, msg: str) -> None:
    if node is None:
        raise ValueError(msg)
    raise shape_error(node, msg)


def pad_for_windows(x: np.ndarray, w: Window, out: Sequence[int], fill: Any
                    ) -> tuple[np.ndarray, list[int]]:
    """Pad spatial dims so every output window fits; returns the array and the begin pads."""
    width = [(0, 0), (0, 0)]
    for i in range(w.n):
        need = (out[i] - 1) * w.strides[i] + w.extent(i)
        begin = w.pads[i]
        end = need - x.shape[i + 2] - begin
        width.append((begin, max(end, 0)))
    padded = np.pad(x, width, mode="constant", constant_values=fill)
    return padded, [b for b, _ in width[2:]]


def window_slices(w: Window, out: Sequence[int]) -> Iterator[tuple[tuple[int, ...], tuple]]:
    """(kernel offset, slice tuple over a padded N,C,spatial array) for each kernel tap."""
    for kpos in itertools.product(*(range(k) for k in w.kernel)):
        sl = tuple(slice(k * d, k * d + (o - 1) * s + 1, s)
                   for k, d, o, s in zip(kpos, w.dilations, out, w.strides))
        yield kpos, (slice(None), slice(None)) + sl
