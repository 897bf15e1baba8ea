"""Stiff mechanisms: implicit diffrax solvers through every solver wrapper, against explicit
references; the stiff spring pendulum's step counts, energy balance and gradients."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import cumulative_simpson

import jaxmbs
from jaxmbs.integrate.solvers import exact_newton
from jaxmbs.models import flyball
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
    [("qr", "none"), ("qr", "baumgarte"), ("qr", "projection"), ("partitioning", "projection")],
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


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_gradient_through_implicit_solve(pendulum, mode):
    """d(final bob radius and rod angle)/d(k, c) against central differences; reverse mode
    the default (`jaxmbs.integrate.adjoint`). diffrax's checkpointed adjoint alone passed or
    failed (1.5e-3 relative off) with last-bit changes of the compiled program."""
    mech, q0, qd0 = pendulum
    t1 = 0.3
    adjoint = diffrax.ForwardMode() if mode == "forward" else None

    def loss(log_kc):
        params = {**mech.params, "k": jnp.exp(log_kc[0]), "c": jnp.exp(log_kc[1])}
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, t1), params=params, solver=diffrax.Kvaerno5(), rtol=1e-12,
            atol=1e-12, stabilization="none", adjoint=adjoint,
        )  # fmt: skip
        q = sol.q[-1]
        return 1e5 * (jnp.linalg.norm(q[3:5]) - 1.0) + q[2]

    x = jnp.log(jnp.array([mech.params["k"], mech.params["c"]]))
    grad = jax.jacfwd(loss)(x) if mode == "forward" else jax.grad(loss)(x)
    h = 1e-3  # the loss is amplified 1e5×: a smaller step would feel the solve's round-off
    fd = np.array([(loss(x + h * e) - loss(x - h * e)) / (2 * h) for e in np.eye(2)])
    assert np.all(np.abs(fd) > 1e-3)  # (measured: h = 1e-4 off by 2e-6, 1e-3 by 2e-8)
    np.testing.assert_allclose(np.asarray(grad), fd, rtol=1e-6, atol=1e-8)


def test_flyball_governor_implicit_against_explicit():
    """The stiff spatial governor (Euler-parameter bodies, K = 8e5 N/m, C = 4e4 N s/m) over
    0.3 s at rtol = atol = 1e-8: Kvaerno5 in far fewer steps, the same slider motion, and
    kinetic + potential + dissipated energy constant."""
    mech = flyball.flyball()
    q0, qd0 = flyball.initial_state(mech)
    ts = np.linspace(0.0, 0.3, 601)
    runs = {
        name: jaxmbs.simulate(
            mech,
            q0,
            qd0,
            (0.0, 0.3),
            saveat=ts,
            solver=solver,
            rtol=1e-8,
            atol=1e-8,
            max_steps=100_000,
        )  # fmt: skip
        for name, solver in (("implicit", diffrax.Kvaerno5()), ("explicit", diffrax.Tsit5()))
    }
    steps = {name: int(sol.stats["num_steps"]) for name, sol in runs.items()}
    assert 10 * steps["implicit"] <= steps["explicit"], steps
    height = {name: flyball.slider_height(sol.q) for name, sol in runs.items()}
    assert np.ptp(height["explicit"]) > 0.01  # the slider moves
    assert np.max(np.abs(height["implicit"] - height["explicit"])) < 1e-6
    for sol in runs.values():
        work = cumulative_simpson(np.asarray(jaxmbs.element_power(mech, sol)), x=ts, initial=0)
        energy = np.asarray(sol.energy)
        assert np.max(np.abs(energy - energy[0] - work)) < 1e-6 * np.max(np.abs(energy))
