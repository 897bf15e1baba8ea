"""Stiff mechanisms: implicit diffrax solvers through every solver wrapper, against explicit
references; the stiff spring pendulum's step counts and energy balance. Its gradients are in
`test_stiff_gradients.py`, the stiff spatial governor in `test_stiff_flyball.py` (split so
that pytest-xdist's workers, each given whole modules, balance)."""

import diffrax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import cumulative_simpson

import jaxmbs
from jaxmbs.integrate.solvers import exact_newton
from jaxmbs.models import spring_pendulum as sp

T1 = 1.0
TS = np.linspace(0.0, T1, 2001)
TOL = 1e-10


@pytest.fixture(scope="module")
def pendulum():
    mech = sp.spring_pendulum()
    return (mech, *sp.initial_state(mech, angle=-0.5, rate=1.0))


@pytest.fixture(scope="module")
def reference(pendulum):
    """Tsit5 at 1e-12: the explicit reference (45 000 steps)."""
    mech, q0, qd0 = pendulum
    sol = jaxmbs.simulate(
        mech, q0, qd0, (0.0, T1), saveat=TS, rtol=1e-12, atol=1e-12, max_steps=200_000
    )
    assert sol.successful
    return sol


@pytest.fixture(scope="module")
def explicit(pendulum):
    mech, q0, qd0 = pendulum
    return jaxmbs.simulate(
        mech, q0, qd0, (0.0, T1), saveat=TS, rtol=TOL, atol=TOL, max_steps=200_000
    )


def test_default_root_finder_becomes_newton_and_a_chosen_one_is_kept():
    """`exact_newton` gives diffrax's default chord root finder Newton's method; a root
    finder the user chose, and an explicit solver, come back unchanged: the same object."""
    import optimistix as optx

    solver = exact_newton(diffrax.Kvaerno5())
    assert type(solver.root_finder) is optx.Newton
    chosen = diffrax.Kvaerno5(root_finder=diffrax.VeryChord(rtol=1e-6, atol=1e-6))
    assert exact_newton(chosen) is chosen
    explicit = diffrax.Tsit5()
    assert exact_newton(explicit) is explicit  # an explicit solver is unchanged


@pytest.mark.parametrize(
    ("method", "stabilization"),
    [("qr", "none"), ("qr", "baumgarte"), ("qr", "projection"), ("partitioned", "projection")],
)
def test_implicit_solver_through_every_wrapper(pendulum, reference, method, stabilization):
    """ProjectedSolver, SwitchingSolver (with the projection inside) and no wrapper."""
    mech, q0, qd0 = pendulum
    sol = jaxmbs.simulate(
        mech, q0, qd0, (0.0, T1), saveat=TS, method=method, stabilization=stabilization,
        solver=diffrax.Kvaerno5(), rtol=TOL, atol=TOL,
    )  # fmt: skip
    assert sol.successful
    assert float(jnp.max(jnp.abs(sol.q - reference.q))) < 1e-6
    assert float(jnp.max(jnp.abs(sol.qd - reference.qd))) < 1e-6


def test_implicit_takes_ten_times_fewer_steps_and_balances_energy(pendulum, reference, explicit):
    mech, q0, qd0 = pendulum
    sol = jaxmbs.simulate(
        mech, q0, qd0, (0.0, T1), saveat=TS, solver=diffrax.Kvaerno5(), rtol=TOL, atol=TOL
    )
    steps, steps_explicit = int(sol.stats["num_steps"]), int(explicit.stats["num_steps"])
    assert 10 * steps <= steps_explicit, (steps, steps_explicit)
    assert float(jnp.max(jnp.abs(sol.q - explicit.q))) < 1e-6
    # E(t) − E(0) = ∫ P dt: the damper's power, integrated over the outputs (Simpson).
    for run in (sol, explicit):
        work = cumulative_simpson(np.asarray(jaxmbs.element_power(mech, run)), x=TS, initial=0)
        energy = np.asarray(run.energy)
        dissipated = -work[-1]
        assert dissipated > 1e-6  # the damper works: the balance is not trivially zero
        balance = np.max(np.abs(energy - energy[0] - work)) / abs(energy[0])
        assert balance < 1e-6, balance


def test_element_force_is_the_linear_law(pendulum, explicit):
    mech, *_ = pendulum
    p = mech.params
    f = np.asarray(jaxmbs.element_forces(mech, explicit)["spring"])
    q, qd = np.asarray(explicit.q), np.asarray(explicit.qd)
    # pivot at the origin, bob centre at q[3:5]: δ = |r_bob|, δ̇ = r̂ · v_bob.
    length = np.linalg.norm(q[:, 3:5], axis=1)
    rate = np.sum(q[:, 3:5] * qd[:, 3:5], axis=1) / length
    expected = p["k"] * (length - p["l"]) + p["c"] * rate
    assert np.max(np.abs(f - expected)) < 1e-9 * np.max(np.abs(expected)) + 1e-9
    assert np.max(np.abs(expected)) > 1.0  # the spring carries the bob (~mg + centrifugal)
