"""The CPU schedule: the loop order of reductions ("i, k, j" sums, residue splitting:
:mod:`.sum_order`), register blocking of contractions and row reductions, loops split at
``%`` periods, row loops fused, short parallel loops collapsed (:mod:`.schedule`)."""

from .schedule import fuse_parallel, schedule_cpu

__all__ = ["fuse_parallel", "schedule_cpu"]
