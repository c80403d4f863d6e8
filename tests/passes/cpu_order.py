"""Lowering followed by the CPU schedule's first step, the loop order of reductions
(passes/schedule/cpu/sum_order.py): the programs the later CPU schedule steps receive."""

from __future__ import annotations

from tecomp.passes import lower as plain
from tecomp.passes.schedule.cpu.sum_order import order_sums


def lower_program(outputs, inputs, **kw):
    """:func:`tecomp.passes.lower.lower_program` in the CPU loop order."""
    func, constants = plain.lower_program(outputs, inputs, **kw)
    return order_sums(func), constants


def lower(outputs, inputs, **kw):
    """:func:`tecomp.passes.lower.lower` in the CPU loop order."""
    return order_sums(plain.lower(outputs, inputs, **kw))
