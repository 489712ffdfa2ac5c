"""A Python operator plugin for the tests (`graphengine serve --plugin clip_scale.py`)."""

import numpy as np

import graphengine


def clip_scale(x, *, scale=2.0, limit=1.0):
    """y = clip(x, -limit, limit) * scale"""
    return (np.clip(x, -limit, limit) * scale).astype(x.dtype)


graphengine.register_op("ClipScale", clip_scale, domain="test.py",
                        attrs={"scale": 2.0, "limit": 1.0})
