"""Second-order differential operators by forward propagation (DOF) and the Hessian baseline.

:func:`dof_operator` propagates ``(value, L grad, operator)`` (:mod:`.propagate`, rules in
:mod:`.rules`) with ``A = L^T D L`` from :func:`decompose`; :func:`hessian_operator` builds the
per-sample Hessian by forward over reverse mode and contracts it with ``A``.
"""

from .batch import batch_positions
from .decompose import Decomposition, check_operator_matrix, constant_stage, decompose
from .propagate import dof_operator

__all__ = ["Decomposition", "batch_positions", "check_operator_matrix", "constant_stage",
           "decompose", "dof_operator"]
