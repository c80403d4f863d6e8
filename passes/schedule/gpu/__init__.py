"""The GPU schedule: which statements become kernels, which loops map onto the grid, which
stores are atomic, and the block-level patterns (:mod:`.schedule`, :mod:`.blocks`)."""

from .schedule import schedule as schedule_gpu

__all__ = ["schedule_gpu"]
