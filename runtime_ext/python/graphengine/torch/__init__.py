"""GraphEngine as a torch.compile backend (TorchAir's role).

    import torch, graphengine.torch
    with torch.no_grad():
        y = torch.compile(model, backend="graphengine")(x)            # in process
        y = torch.compile(model, backend=graphengine.torch.backend(server="host:7000"))(x)
    print(graphengine.torch.last_report())   # what ran where, and why not

Needs torch (`pip install graphengine[torch]` installs nothing of it: install the torch
build you want first). The `graphengine` name is registered through the
`torch_dynamo_backends` entry point. Inside this package `torch` is the top-level package:
modules here import it absolutely.
"""

from __future__ import annotations

from .compiler import (
    Backend,
    TrainingGraphError,
    UnsupportedGraphError,
    backend,
    last_report,
    registered_backend,
)
from .convert import CONVERTERS
from .report import CompileReport, Fallback, Partition

__all__ = ["CONVERTERS", "Backend", "CompileReport", "Fallback", "Partition",
           "TrainingGraphError", "UnsupportedGraphError", "backend", "last_report",
           "registered_backend"]
