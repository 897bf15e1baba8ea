"""Design optimisation with exact gradients through the whole simulation.

A design loss is a pure function of the parameters (masses, inertias, lengths, …) that
assembles a consistent initial state, simulates, and compares an observed quantity with a
target. Its gradient comes by automatic differentiation through every solver step:

- **Reverse mode** (`jax.grad`, the default of `optimize`): `simulate` differentiates the
  discrete solve itself ("discretise, then optimise": the gradient of exactly the computed
  loss) on the forward run's accepted steps, by the discrete adjoint
  (`jaxmbs.integrate.adjoint`): the backward pass applies the vjp of one step in reverse
  over the recorded steps, recomputing them in segments (about 2√max_steps stored states,
  ≈ 630 for the default max_steps = 100 000, and 8 bytes of step time per step of
  max_steps). The cost is independent of the number of parameters.
- **Forward mode** (`adjoint=diffrax.ForwardMode()` in `simulate`, `gradient="forward"`
  here): one tangent solve per parameter, no stored trajectory; cheaper than reverse mode
  for a handful of parameters (see `benchmarks/batch.py`).
- **Central differences** (`gradient="central-difference"`): 2k simulations per gradient
  for k parameters, with truncation and round-off error; provided for comparison only.

`consistent_state` is the counterpart of [`jaxmbs.assemble`][] that runs inside `jit` and
`grad` (a fixed number of Newton iterations), so that lengths can be design variables:
changing a length moves the consistent initial configuration, and the gradient follows.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jax.flatten_util import ravel_pytree

from ._internal.types import Array, ArrayLike, Params
from .integrate import RESULTS, simulate

if TYPE_CHECKING:
    from .model import Mechanism

GRADIENT_MODES = ("reverse", "forward", "central-difference")


def trajectory_loss(
    mechanism: Mechanism,
    initial_state: Callable[[Params], tuple[Array, Array]],
    observe: Callable[..., Array],
    ts: ArrayLike,
    target: ArrayLike,
    *,
    t0: float = 0.0,
    **simulate_kwargs,
) -> Callable[[Params], Array]:
    """Mean squared mismatch between an observed quantity along the motion and a target.

        L(p) = mean over i, j of (y_j(t_i; p) − y*_ij)²,   y = observe(t, q, q̇, p)

    **Arguments:**

    - `mechanism`: the mechanism.
    - `initial_state`: `params -> (q0, qd0)`, consistent and differentiable (e.g. with
      [`jaxmbs.consistent_state`][]).
    - `observe`: `(t, q, qd, params) -> array`, e.g. a coupler point's position.
    - `ts`: output times (a 1-D array; the simulation runs from `t0` to `ts[-1]`).
    - `target`: the wanted values, shape (len(ts), …).
    - `simulate_kwargs`: passed to [`jaxmbs.simulate`][] (`rtol`, `atol`, `adjoint`, …).

    **Returns:** `loss(params) -> scalar`; NaN where the simulation fails (a line search
    then backs off), so `throw` defaults to False here.
    """
    ts = jnp.asarray(ts)
    target = jnp.asarray(target)
    simulate_kwargs.setdefault("throw", False)

    def loss(params):
        q0, qd0 = initial_state(params)
        sol = simulate(
            mechanism, q0, qd0, (t0, ts[-1]), saveat=ts, params=params, **simulate_kwargs
        )
        y = jax.vmap(observe, in_axes=(0, 0, 0, None))(sol.ts, sol.q, sol.qd, params)
        value = jnp.mean((y - target) ** 2)
        return jnp.where(sol.result == RESULTS.successful, value, jnp.nan)

    return loss


def central_difference_gradient(loss: Callable, x, step: float = 1e-6):
    """Central-difference gradient of a scalar `loss` of a pytree `x` (2k evaluations).

    Component i uses h_i = step · max(1, |x_i|); the evaluations run one after another
    (`lax.map`), as a finite-difference optimiser would.
    """
    flat, unravel = ravel_pytree(x)
    h = step * jnp.maximum(1.0, jnp.abs(flat))
    shifts = jnp.concatenate([jnp.diag(h), -jnp.diag(h)])
    values = jax.lax.map(lambda d: loss(unravel(flat + d)), shifts)
    k = flat.shape[0]
    return unravel((values[:k] - values[k:]) / (2 * h))


@dataclasses.dataclass(frozen=True)
class OptimizationResult:
    """The outcome of [`jaxmbs.optimize`][].

    **Fields:**

    - `x`: the final design variables.
    - `loss`: the loss there.
    - `converged`: whether the solver's termination test was met within `max_steps`.
    - `message`: the solver's result message (empty on success).
    - `history`: per solver step, `loss` (at the last accepted iterate), `accepted`
      (cumulative accepted steps) and `wall_s` (since the start, compilation included).
    - `num_steps`: solver steps (loss evaluations; one gradient per accepted step).
    - `compile_s`: wall seconds of the first step (mostly compilation).
    - `wall_s`: total wall seconds.
    """

    x: Any
    loss: float
    converged: bool
    message: str
    history: dict[str, np.ndarray]
    num_steps: int
    compile_s: float
    wall_s: float


def optimize(
    loss: Callable[[Any], Array],
    x0,
    *,
    solver: optx.AbstractMinimiser | None = None,
    max_steps: int = 100,
    gradient: str = "reverse",
    fd_step: float = 1e-6,
    progress: bool = False,
    compiler_options: dict[str, Any] | None = None,
) -> OptimizationResult:
    """Minimise `loss(x)` over a pytree of design variables with an optimistix minimiser.

    The solver is stepped from Python, one jitted step at a time (compiled once), so the
    loss history is recorded. Positive quantities are best optimised in log scale
    (`p = p_ref · exp(x)`), inside `loss`.

    **Arguments:**

    - `loss`: `x -> scalar`, pure (e.g. from [`jaxmbs.trajectory_loss`][]).
    - `x0`: initial design variables (a pytree of float arrays).
    - `solver`: an optimistix minimiser (default `optx.BFGS(rtol=1e-8, atol=1e-8)`).
    - `max_steps`: step limit.
    - `gradient`: `"reverse"` (reverse-mode autodiff), `"forward"` (forward mode; the loss
      must simulate with `adjoint=diffrax.ForwardMode()`) or `"central-difference"`
      (finite differences with relative step `fd_step`, for comparison).
    - `progress`: show a progress bar with the current loss.
    - `compiler_options`: XLA options for the compiled step (`jax.jit`'s), e.g.
      `{"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}` on a
      CPU: a large model's gradient compiles in about half the time and runs about twice as
      long (docs/performance.md), the better trade for a few dozen steps.

    **Returns:** an [`jaxmbs.OptimizationResult`][].
    """
    if gradient not in GRADIENT_MODES:
        raise ValueError(f"gradient must be one of {GRADIENT_MODES}, got {gradient!r}")
    solver = optx.BFGS(rtol=1e-8, atol=1e-8) if solver is None else solver
    objective = _with_finite_differences(loss, fd_step) if gradient == GRADIENT_MODES[2] else loss
    options = {"autodiff_mode": "fwd" if gradient == "forward" else "bwd"}
    y = jax.tree_util.tree_map(jnp.asarray, x0)
    tags = frozenset()

    def fn(x, args):
        return objective(x), None

    f_struct, aux_struct = jax.eval_shape(lambda: fn(y, None))
    state = solver.init(fn, y, None, options, f_struct, aux_struct, tags)

    @functools.partial(eqx.filter_jit, compiler_options=compiler_options)
    def step(y, state):
        y, state, _ = solver.step(fn, y, None, options, state, tags)
        done, result = solver.terminate(fn, y, None, options, state, tags)
        return y, state, done, result

    from tqdm.auto import tqdm

    history: dict[str, list] = {"loss": [], "accepted": [], "wall_s": []}
    start = time.perf_counter()
    done, result = False, optx.RESULTS.successful
    bar = tqdm(total=max_steps, desc="optimize", disable=not progress)
    for _ in range(max_steps):
        y, state, done, result = step(y, state)
        history["loss"].append(float(state.f_info.f))
        history["accepted"].append(int(state.num_accepted_steps))
        history["wall_s"].append(time.perf_counter() - start)
        bar.set_postfix(loss=f"{history['loss'][-1]:.3e}")
        bar.update(1)
        if bool(done):
            break
    bar.close()
    return _result(y, history, bool(done), result, max_steps)


def _result(y, history: dict[str, list], done: bool, result, max_steps: int) -> OptimizationResult:
    """The `OptimizationResult` of the last accepted iterate y (its loss: the recorded one),
    converged where the solver terminated successfully."""
    converged = done and bool(result == optx.RESULTS.successful)
    if result != optx.RESULTS.successful:
        message = f"did not converge: {optx.RESULTS[result]}"
    elif not converged:
        message = f"did not converge in max_steps = {max_steps} steps"
    else:
        message = ""
    return OptimizationResult(
        x=jax.tree_util.tree_map(np.asarray, y),
        loss=history["loss"][-1],
        converged=converged,
        message=message,
        history={k: np.asarray(v) for k, v in history.items()},
        num_steps=len(history["loss"]),
        compile_s=history["wall_s"][0],
        wall_s=history["wall_s"][-1],
    )


def _with_finite_differences(loss: Callable, step: float) -> Callable:
    """`loss` whose reverse-mode derivative is the central-difference gradient."""

    @jax.custom_vjp
    def wrapped(x):
        return loss(x)

    def forward(x):
        return loss(x), x

    def backward(x, cotangent):
        grad = central_difference_gradient(loss, x, step)
        return (jax.tree_util.tree_map(lambda g: cotangent * g, grad),)

    wrapped.defvjp(forward, backward)
    return wrapped
