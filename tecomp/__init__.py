"""tecomp: a tensor-expression compiler with exact zero elimination for fast derivatives.

Declare tensors element-wise with index lambdas, differentiate them, and build kernels::

    import tecomp as tc
    n = tc.var("n")
    A = tc.placeholder((n, 64), name="A")
    k = tc.reduce_axis(64, name="k")
    S = tc.compute((n,), lambda i: tc.sum(A[i, k] * A[i, k], axis=k), name="S")
    print(tc.show(S))

The architecture and the full public contract: ``docs/design.md`` in the source tree; a
walk-through with output: ``docs/guide.md``.  ``help(tc.compute)`` (and every other public
function) has an example.
"""

from . import dsl, logs
from .autodiff_api import gradient, jacobian
from .build_api import build
from .config_api import config
from .diagnostics import Explanation, PerformanceWarning, explain, pass_log
from .dot import to_dot
from .dsl import (
    all,
    any,
    cast,
    compute,
    const,
    constant,
    eq,
    if_then_else,
    max,
    maximum,
    min,
    minimum,
    ne,
    placeholder,
    prod,
    reduce_axis,
    sum,
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
from .scan import scan
from .tensor import Tensor

# tc.exp, tc.log, ...: the element-wise math functions, one per entry of the op table
# (tecomp.intrinsics), built in tecomp.dsl
globals().update(dsl.ELEMENTWISE)

__version__ = "0.1.0"

#: subpackages imported on first use (``tc.ops.conv2d``, ``tc.interop.jax_function``), so that
#: ``import tecomp`` does not pay for them
_LAZY = ("ops", "interop")


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'tecomp' has no attribute {name!r}")


logs.configure_from_environment()  # TECOMP_LOG=info|debug: timings on stderr (tecomp.logs)

__all__ = [
    "ops",
    "optimize",
    "all", "any", "cast", "compute", "const", "constant", "eq", "if_then_else", "max",
    "maximum", "min", "minimum", "ne", "placeholder", "prod", "reduce_axis", "sum", "var",
    "config", "CacheWarning",
    "ArgumentError", "CompileError", "DeclarationError", "DifferentiationError",
    "EvaluationError", "IndexBoundsError", "LoweringError", "TecompError", "evaluate",
    "Expr", "IterVar", "Var",
    "scan", "show", "Tensor", "build", "gradient", "jacobian",
    "Lowered", "cost", "lower",
    "diff_operator", "hessian", "jvp", "laplacian",
    "Explanation", "PerformanceWarning", "explain", "pass_log", "to_dot", "interop",
    *sorted(dsl.ELEMENTWISE),
]
