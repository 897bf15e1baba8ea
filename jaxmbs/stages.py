"""Runge–Kutta stage combinations as multiply-adds (`UnrolledStages`).

An explicit Runge–Kutta step forms, at stage i, the state y₀ + h Σ_j a_ij k_j, and at the
end y₁ = y₀ + h Σ_j b_j k_j and the error estimate h Σ_j (b_j − b̂_j) k_j. diffrax
(0.7) writes each of these sums as a `jnp.tensordot` of a tableau row with the buffer of
stages k (stages × state). XLA's CPU backend hands such a product to a library routine,
and under `jax.vmap` (stage buffer (B, stages, n)) first transposes the whole buffer to
(stages, B·n) at every stage. For the state sizes of a mechanism the call and the copy cost
more than the arithmetic: on the vmapped four-bar the transpose and product took ~20 % of
each stage. As a chain of multiply-adds of the stages the same sum fuses with its
neighbours and reads the batched buffer in place.

The sums are diffrax's (`diffrax._solver.runge_kutta.vector_tree_dot`); `UnrolledStages`
swaps that function for `stage_sum` while the wrapped solver's `step` is traced, so every
trace of the step (the forward solve, the recomputation of reverse mode's checkpointed
loop) sees the same sums. Nothing changes outside the step, and other diffrax solves in
the same program keep diffrax's products. Where diffrax no longer has that function the
wrapper changes nothing (`active`).
"""

from __future__ import annotations

import contextlib
import functools
import operator
import threading
from collections.abc import Iterator

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from .stabilization import DelegatingSolver

try:
    from diffrax._solver import runge_kutta as _runge_kutta
except ImportError:  # pragma: no cover - a diffrax without that module
    _runge_kutta = None

#: Whether diffrax's stage sums can be replaced (see the module docstring).
active: bool = _runge_kutta is not None and hasattr(_runge_kutta, "vector_tree_dot")

_swap_lock = threading.RLock()


def stage_sum(a, ks):
    """Σ_j a_j k_j over the leading (stage) axis of every leaf of the pytree `ks`, as a
    chain of multiply-adds; the coefficients `a` (stages,) may be traced. Known zero
    coefficients (a tableau's b̂ and b rows) are skipped."""
    known = None if isinstance(a, jax.core.Tracer) else np.asarray(a)

    def leaf(k):
        terms = [
            (a[j] if known is None else known[j]) * k[j]
            for j in range(k.shape[0])
            if known is None or known[j] != 0
        ]
        if not terms:
            return jnp.zeros(k.shape[1:], jnp.result_type(a, k))
        return functools.reduce(operator.add, terms)

    return jax.tree_util.tree_map(leaf, ks)


@contextlib.contextmanager
def _stage_sums_unrolled() -> Iterator[None]:
    """diffrax's stage sums are `stage_sum` inside this block (one thread at a time)."""
    if not active:
        yield
        return
    with _swap_lock:
        saved = _runge_kutta.vector_tree_dot
        _runge_kutta.vector_tree_dot = stage_sum
        try:
            yield
        finally:
            _runge_kutta.vector_tree_dot = saved


class UnrolledStages(DelegatingSolver):
    """A diffrax Runge–Kutta solver whose stage combinations are multiply-adds
    (`stage_sum`) instead of tensor products: the same method, steps and results up to
    round-off. `jaxmbs.simulate` wraps its Runge–Kutta solvers in it."""

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        with _stage_sums_unrolled():
            return self.solver.step(terms, t0, t1, y0, args, solver_state, made_jump)


def unrolled_stages(solver: diffrax.AbstractSolver) -> diffrax.AbstractSolver:
    """`solver` wrapped in `UnrolledStages` if it is a diffrax Runge–Kutta solver (the only
    kind whose step forms those sums), else unchanged."""
    if active and isinstance(solver, diffrax.AbstractRungeKutta):
        return UnrolledStages(solver)
    return solver
