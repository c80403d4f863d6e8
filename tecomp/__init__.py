"""tecomp: a tensor-expression compiler with exact zero elimination for fast derivatives.

Declare tensors element-wise with index lambdas, differentiate them, and build kernels::

    import tecomp as tc
    n = tc.var("n")
    A = tc.placeholder((n, 64), name="A")
    k = tc.reduce_axis(64, name="k")
    S = tc.compute((n,), lambda i: tc.sum(A[i, k] * A[i, k], axis=k), name="S")
    print(tc.show(S))

See ``DESIGN.md`` of the project for the full public contract.
"""

from . import interop, ops
from .autodiff_api import gradient, jacobian
from .build_api import build
from .config_api import config
from .diagnostics import Explanation, PerformanceWarning, explain, pass_log
from .dot import to_dot
from .dsl import (
    abs,
    all,
    any,
    cast,
    ceil,
    compute,
    const,
    constant,
    cos,
    eq,
    erf,
    exp,
    floor,
    if_then_else,
    log,
    max,
    maximum,
    min,
    minimum,
    ne,
    placeholder,
    pow,
    prod,
    reduce_axis,
    sigmoid,
    sin,
    sqrt,
    sum,
    tanh,
    var,
)
from .errors import (
    ArgumentError,
    CacheWarning,
    CompileError,
    DeclarationError,
    DifferentiationError,
    EvaluationError,
    IndexBoundsError,
    LoweringError,
    TecompError,
)
from .evaluate import evaluate
from .expr import Expr, IterVar, Var
from .forward_api import diff_operator, hessian, jvp, laplacian
from .lowering_api import Lowered, cost, lower
from .optimize_api import optimize
from .printer import show
from .tensor import Tensor

__version__ = "0.1.0"

__all__ = [
    "ops",
    "optimize",
    "abs", "all", "any", "cast", "ceil", "compute", "const", "constant", "cos", "eq", "erf", "exp",
    "floor", "if_then_else", "log", "max", "maximum", "min", "minimum", "ne", "placeholder",
    "pow", "prod", "reduce_axis", "sigmoid", "sin", "sqrt", "sum", "tanh", "var",
    "config", "CacheWarning",
    "ArgumentError", "CompileError", "DeclarationError", "DifferentiationError",
    "EvaluationError", "IndexBoundsError", "LoweringError", "TecompError", "evaluate",
    "Expr", "IterVar", "Var",
    "show", "Tensor", "build", "gradient", "jacobian",
    "Lowered", "cost", "lower",
    "diff_operator", "hessian", "jvp", "laplacian",
    "Explanation", "PerformanceWarning", "explain", "pass_log", "to_dot", "interop",
]
