"""Errors raised by tecomp.

Every error a user can cause is a :class:`TecompError` (or a subclass); its message names the
tensor, axis or expression at fault.  Exceptions raised by the user's own lambdas propagate
unchanged.
"""

from __future__ import annotations


class TecompError(Exception):
    """Base class of every error tecomp raises on behalf of the user."""


class DeclarationError(TecompError):
    """A tensor, axis or expression was declared inconsistently (arity, dtype, extent)."""


class DifferentiationError(TecompError):
    """A derivative was requested that does not exist (integer inputs, unsupported op)."""


class LoweringError(TecompError):
    """A program could not be lowered to loop IR."""


class CompileError(TecompError):
    """A backend failed to compile a lowered program; the message names the stage."""


class ArgumentError(TecompError):
    """A kernel was called with arrays of the wrong count, shape, dtype or size."""


class EvaluationError(TecompError):
    """The reference evaluator met an invalid program or binding (e.g. out-of-bounds read)."""


class IndexBoundsError(ArgumentError):
    """A kernel read or wrote a tensor at a data-dependent index outside its shape."""


class CacheWarning(UserWarning):
    """The persistent cache could not be used as asked (untrusted or unwritable directory, a
    corrupt entry); tecomp carries on without it.  Given once per cache and cause."""
