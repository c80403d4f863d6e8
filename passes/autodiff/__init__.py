"""Reverse-mode automatic differentiation of tensor expressions.

:func:`differentiate` (in :mod:`.reverse`) is the pass; the rule table is in :mod:`.rules` and
:mod:`.reductions`, the Jacobian mutator in :mod:`.jacobian`.  The public entry points are
``tc.gradient`` and ``tc.jacobian`` (:mod:`tecomp.autodiff_api`).
"""

from .reverse import differentiate

__all__ = ["differentiate"]
