"""Forward-mode differentiation: tangent propagation through the compute DAG.

:func:`forward_tangents` is the driver, :mod:`.rules` the first-derivative rule table,
:mod:`.reductions` the max/min/prod forms and :mod:`.context` the per-stage state (tangent
tensors, direction axes, hoisting) that the DOF pass reuses.
"""

from .context import ExprTangent, Names, StageContext, TangentTensor, new_stage
from .propagate import forward_tangents, materialize

__all__ = ["ExprTangent", "Names", "StageContext", "TangentTensor", "forward_tangents",
           "materialize", "new_stage"]
