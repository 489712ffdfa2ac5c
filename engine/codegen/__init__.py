"""Stage 4, compile (build): memory planning, stream assignment, task generation."""

from .memory import Buffer, MemoryPlan, lower_bound, plan_memory
from .tasks import build_programs

__all__ = ["Buffer", "MemoryPlan", "plan_memory", "lower_bound", "build_programs"]
