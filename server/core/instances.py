"""How long a waiting caller sleeps between looks at its cancel and deadline.

Model instances are the runtime's own (engine.runtime.LoadedModel: N arenas sharing one copy
of the weights, runs queued natively when all are busy, the queue honouring a run's deadline
and native cancel token). A session holds one LoadedModel per compiled signature and calls
`LoadedModel.run` for every request; a cancellation given only as a Python callable is
checked as the run starts (to cancel while queued, give a token: `RunControl.token`).
"""

from __future__ import annotations

POLL_SECONDS = 0.05  # how often a caller waiting for a compile looks at its cancel and deadline
