"""Design optimisation: a four-bar coupler-point curve is matched by tuning two lengths and
two masses (`design_problem.py`). The loss gradient (reverse mode through assembly and
simulation) matches central differences; BFGS recovers the true design from a poor start.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from design_problem import NAMES, X0, design_problem

import jaxmbs
from jaxmbs.models import fourbar


@pytest.fixture(scope="module")
def problem():
    return design_problem()


def test_consistent_state_matches_assemble(problem):
    mech, to_params, initial_state, _ = problem
    params = to_params(jnp.asarray(X0))
    q, qd = jax.jit(initial_state)(params)
    q_ref, qd_ref = fourbar.initial_state(mech.replace_params(params), np.pi / 3, 2.0)
    np.testing.assert_allclose(q, q_ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(qd, qd_ref, rtol=0, atol=1e-12)
    # The fixed coordinate keeps its guessed angle and speed (both functions copy them).
    crank = mech.coordinate_names.index("crank.phi")
    for state in (q, q_ref):
        np.testing.assert_allclose(state[crank], np.pi / 3, rtol=1e-15)
    for state in (qd, qd_ref):
        np.testing.assert_allclose(state[crank], 2.0, rtol=1e-15)

    # Its derivative is the implicit-function one: compare with central differences.
    def q0_of(x):
        return initial_state(to_params(x))[0]

    jac = jax.jit(jax.jacfwd(q0_of))(jnp.asarray(X0))
    h = 1e-6
    shifts = h * jnp.eye(len(NAMES))
    batched = jax.jit(jax.vmap(q0_of))
    fd = ((batched(X0 + shifts) - batched(X0 - shifts)) / (2 * h)).T
    assert float(jnp.max(jnp.abs(jac - fd))) < 1e-8
    assert float(jnp.max(jnp.abs(jac[:, :2]))) > 0.1  # lengths move the assembled state


def test_consistent_state_derivative_is_the_implicit_function_one(problem):
    """With the crank angle fixed, J = [Φ_q ; E_F] is square: the derivative of the
    assembled q* is that of the root (one solve at q*), the same in forward and reverse
    mode, moved by the fixed coordinate's guess and by no other guess coordinate; without
    a fixed coordinate the minimum-norm iterations are differentiated as they run."""
    mech, to_params, _, _ = problem
    q_ref, qd_ref = fourbar.initial_state(mech, np.pi / 3, 2.0)
    x0 = jnp.asarray(X0)

    def q0_of(x, q_guess, fixed=("crank.phi",)):
        return jaxmbs.consistent_state(mech, q_guess, qd_ref, params=to_params(x), fixed=fixed)[0]

    fwd = jax.jit(jax.jacfwd(q0_of, argnums=(0, 1)))(x0, q_ref)
    rev = jax.jit(jax.jacrev(q0_of, argnums=(0, 1)))(x0, q_ref)
    for a, b in zip(fwd, rev, strict=True):
        assert float(jnp.max(jnp.abs(a - b))) < 1e-12
    d_guess = np.asarray(fwd[1])
    crank = mech.coordinate_names.index("crank.phi")
    # Along the motion: dq*/dφ_crank is the velocity map, the state at unit crank speed.
    _, unit_qd = fourbar.initial_state(mech.replace_params(to_params(x0)), np.pi / 3, 1.0)
    assert np.max(np.abs(d_guess[:, crank] - np.asarray(unit_qd))) < 1e-9
    assert np.max(np.abs(np.delete(d_guess, crank, axis=1))) < 1e-12

    # No fixed coordinate: J is not square, and the iterations' derivative agrees with
    # central differences of the same iterations.
    free = jax.jit(jax.jacfwd(lambda x: q0_of(x, q_ref, fixed=())))(x0)
    h = 1e-6
    batched = jax.jit(jax.vmap(lambda x: q0_of(x, q_ref, fixed=())))
    shifts = h * jnp.eye(len(NAMES))
    fd = ((batched(x0 + shifts) - batched(x0 - shifts)) / (2 * h)).T
    assert float(jnp.max(jnp.abs(free - fd))) < 1e-7

    # Second derivatives go through the rule too (a Hessian of a design loss: forward over
    # reverse), against central differences of the gradient.
    def loss(x):
        q, qd = jaxmbs.consistent_state(
            mech, q_ref, qd_ref, params=to_params(x), fixed=("crank.phi",)
        )
        return jnp.sum(q**2) + jnp.sum(qd**3)

    hessian = jax.jit(jax.hessian(loss))(x0)
    grad = jax.jit(jax.vmap(jax.grad(loss)))
    fd = (grad(x0 + shifts) - grad(x0 - shifts)) / (2 * h)
    assert float(jnp.max(jnp.abs(hessian - fd))) < 1e-6 * float(jnp.max(jnp.abs(hessian)))


def test_loss_gradient_matches_central_differences(problem):
    loss = problem[3]
    x0 = jnp.asarray(X0)
    value, grad = jax.jit(jax.value_and_grad(loss))(x0)
    assert float(value) > 1e-3  # a poor design
    fd = jax.jit(lambda x: jaxmbs.central_difference_gradient(loss, x, 1e-5))(x0)
    for g, f in zip(np.asarray(grad), np.asarray(fd), strict=True):
        assert abs(f) > 1e-5  # every design variable matters
        assert abs(g - f) <= 1e-5 * abs(f), (g, f)


def test_optimization_recovers_the_true_design(problem):
    out = jaxmbs.optimize(problem[3], jnp.asarray(X0), max_steps=80)
    assert out.converged, out.message
    # The coupler point follows the target to 1e-8 m RMS, and the design is the true one.
    assert np.sqrt(out.loss) < 1e-8
    assert np.max(np.abs(out.x)) < 1e-6  # log-scale: relative error of lengths and masses
    losses = out.history["loss"]
    assert losses[0] > 1e-3 and np.all(np.diff(losses) <= 0)


def quadratic_bowl(x):
    """An ill-scaled smooth loss with minimum at (1, −2): checks the gradient plumbing."""
    return (x[0] - 1.0) ** 2 + 10.0 * (x[1] + 2.0) ** 2 + 0.5 * (x[0] - 1.0) ** 2 * x[1] ** 2


@pytest.mark.parametrize("gradient", jaxmbs.GRADIENT_MODES)
def test_every_gradient_mode_converges(gradient):
    out = jaxmbs.optimize(quadratic_bowl, jnp.zeros(2), gradient=gradient, max_steps=100)
    assert out.converged
    assert np.max(np.abs(out.x - np.array([1.0, -2.0]))) < 1e-6
    with pytest.raises(ValueError, match="gradient must be one of"):
        jaxmbs.optimize(quadratic_bowl, jnp.zeros(2), gradient="adjoint")


def test_compiler_options_reach_the_compiled_step():
    """`compiler_options` are XLA's for the compiled step: an option XLA does not know fails
    there; with the quick CPU settings the bowl's minimum is found as with the defaults."""
    with pytest.raises(Exception, match="xla_no_such_option"):
        jaxmbs.optimize(quadratic_bowl, jnp.zeros(2), compiler_options={"xla_no_such_option": 0})
    quick = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
    out = jaxmbs.optimize(quadratic_bowl, jnp.zeros(2), max_steps=100, compiler_options=quick)
    assert out.converged
    assert np.max(np.abs(out.x - np.array([1.0, -2.0]))) < 1e-6
