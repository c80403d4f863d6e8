"""The CPU schedule: register blocking of contractions and row reductions, loops split at
``%`` periods, row loops fused, short parallel loops collapsed (:mod:`.schedule`)."""

from .schedule import fuse_parallel, schedule_cpu

__all__ = ["fuse_parallel", "schedule_cpu"]
