"""How far one engine's outputs are from another's (bench-zoo holds every engine to ONNX
Runtime's, so that an engine trading float32 accuracy for speed shows in the run)."""

from __future__ import annotations

import numpy as np

DEVIATION = 1e-3  # of the output's scale; the zoo's check holds each element to rtol 1e-3


def deviation(outs: dict, ref: dict) -> float | None:
    """How far one engine's batch-1 outputs are from ONNX Runtime's: per output of the same
    name, the largest absolute difference over the reference's largest magnitude (floats) or
    the share of elements that differ (integers, booleans); the worst output's."""
    worst = None
    for key in outs.keys() & ref.keys():
        a, b = np.asarray(outs[key]), np.asarray(ref[key])
        if a.shape != b.shape:
            return float("inf")
        if not a.size:
            continue
        if np.issubdtype(b.dtype, np.floating):
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            same = (a64 == b64) | (np.isnan(a64) & np.isnan(b64))
            with np.errstate(invalid="ignore"):  # inf - inf where `same` holds anyway
                diff = np.where(same, 0.0, np.abs(a64 - b64))
            scale = float(np.nanmax(np.abs(np.where(np.isfinite(b64), b64, 0.0)), initial=0.0))
            d = float(np.nan_to_num(diff, nan=np.inf).max()) / max(scale, 1e-30)
        else:
            d = float(np.mean(a != b))
        worst = d if worst is None else max(worst, d)
    return worst
