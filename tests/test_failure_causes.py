"""Every failure named by its cause and its time; nothing silent (issue: one pipeline, item 6).

- a lock / toggle position stops with `singular_configuration` near its analytic time, in a
  few hundred steps (not after max_steps);
- a NaN force is a failed step, with every output past it NaN (gradients too);
- invalid arguments are rejected before anything compiles, naming the argument;
- a user event stops the run at its crossing (the pendulum's quarter period).
"""

import functools

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytest
import scipy.special

import jaxmbs
from jaxmbs.model.joints import planar
from jaxmbs.models import fourbar, pendulum, slider_crank

# ------------------------------------------------------------------------ locking mechanisms


def test_slider_crank_with_crank_longer_than_rod_locks():
    """Crank r = 0.6 m, rod L = 0.5 m, driven at ω = 2π: the rod stands vertical when
    r sin θ = L, θ* = arcsin(5/6), t* = (θ* − π/4)/ω; the drive cannot carry it further."""
    mech = slider_crank.slider_crank(driven=True, r=0.6, L=0.5)
    q0, qd0 = slider_crank.initial_state(mech)
    t_lock = (np.arcsin(0.5 / 0.6) - np.pi / 4) / (2 * np.pi)
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, 0.1), throw=False)
    assert bool(sol.result == jaxmbs.RESULTS.singular_configuration)
    assert abs(float(sol.t_final) - t_lock) < 1e-4 * t_lock + 1e-6
    assert int(sol.stats["num_steps"]) < 2000
    assert bool(jnp.all(jnp.isnan(sol.q)))  # saveat=None: the one output at t1 is NaN
    with pytest.raises(jaxmbs.SimulationError, match=r"singular configuration.*\(t = 0\.031"):
        jaxmbs.simulate(mech, q0, qd0, (0.0, 0.1))


def _driven_non_grashof():
    """Four-bar l0 = 0.5, l1 = 0.4, l2 = 0.3, l3 = 0.35 (s + l > p + q: no link turns fully),
    crank driven at θ = π/3 + 2t. Coupler and rocker align (toggle) when |DB| = l2 + l3."""
    p = {**fourbar.DEFAULTS, "l0": 0.5, "l1": 0.4, "l2": 0.3, "l3": 0.35}
    bodies = [
        planar.Body("crank", "m1", lambda p: p["m1"] * p["l1"] ** 2 / 12),
        planar.Body("coupler", "m2", lambda p: p["m2"] * p["l2"] ** 2 / 12),
        planar.Body("rocker", "m3", lambda p: p["m3"] * p["l3"] ** 2 / 12),
    ]
    half = lambda key, sign=1.0: lambda p: (sign * p[key] / 2, 0.0)  # noqa: E731
    joints = [
        planar.Revolute("A", 0, half("l1", -1)),
        planar.Revolute("B", 0, half("l1"), 1, half("l2", -1)),
        planar.Revolute("C", 1, half("l2"), 2, half("l3")),
        planar.Revolute("D", 2, half("l3", -1), None, lambda p: (p["l0"], 0.0)),
        planar.Driving("drive", 2, lambda t, p: np.pi / 3 + 2.0 * t),
    ]
    mech = planar.planar_mechanism(bodies, joints, p, gravity=lambda p: (0.0, -p["g"]))
    q = fourbar._configuration(p, np.pi / 3)
    mech = mech.with_structure(q)
    qd = np.zeros(9)
    qd[2] = 2.0
    return mech, *jaxmbs.assemble(mech, q, qd, fixed=("crank.phi",))


def test_driven_non_grashof_fourbar_stops_at_toggle():
    mech, q0, qd0 = _driven_non_grashof()
    # |DB|² = l0² + l1² − 2 l0 l1 cos θ = (l2 + l3)²
    theta = np.arccos((0.5**2 + 0.4**2 - 0.65**2) / (2 * 0.5 * 0.4))
    t_toggle = (theta - np.pi / 3) / 2.0
    ts = jnp.linspace(0.0, 0.5, 11)
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, 0.5), saveat=ts, throw=False)
    assert bool(sol.result == jaxmbs.RESULTS.singular_configuration)
    assert abs(float(sol.t_final) - t_toggle) < 1e-3 * t_toggle
    assert int(sol.stats["num_steps"]) < 2000
    before = np.asarray(ts) < float(sol.t_final)
    assert np.all(np.isfinite(sol.q[before])) and np.all(np.isnan(sol.q[~before]))
    np.testing.assert_allclose(sol.q[before, 2], np.pi / 3 + 2.0 * np.asarray(ts)[before])


# ------------------------------------------------------------------------ failed steps


@functools.cache
def _poisoned_pendulum():
    """A mathematical pendulum whose force turns NaN from t = 0.3 s."""
    base = pendulum.mathematical_pendulum()

    def forces(t, q, qd, p):
        return base.forces(t, q, qd, p) * jnp.where(t < 0.3, 1.0, jnp.nan)

    mech = jaxmbs.Mechanism(
        base.mass_matrix,
        forces,
        base.constraints,
        params=base.params,
        coordinate_names=base.coordinate_names,
        reference_q=np.array([np.cos(-1.0), np.sin(-1.0)]),
    )
    return mech, *pendulum.initial_state(mech, 0.5)


def test_nan_force_is_a_failed_step():
    mech, q0, qd0 = _poisoned_pendulum()
    ts = jnp.linspace(0.0, 1.0, 11)
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, 1.0), saveat=ts, throw=False)
    assert bool(sol.result == jaxmbs.RESULTS.step_failed)
    assert 0.25 < float(sol.t_final) <= 0.3
    assert int(sol.stats["num_steps"]) < 2000
    before = np.asarray(ts) <= float(sol.t_final)
    assert np.all(np.isfinite(sol.q[before])) and np.all(np.isnan(sol.q[~before]))
    assert np.all(np.isnan(sol.multipliers[~before])) and np.all(np.isnan(sol.qdd[~before]))
    with pytest.raises(
        jaxmbs.SimulationError, match=r"^jaxmbs.simulate: a step failed.*\(t = 0\.[23]"
    ):
        jaxmbs.simulate(mech, q0, qd0, (0.0, 1.0), saveat=ts)


def test_gradient_through_a_failed_run_is_nan():
    mech, q0, qd0 = _poisoned_pendulum()

    def final_height(g):
        sol = jaxmbs.simulate(mech, q0, qd0, (0.0, 1.0), params={"g": g}, throw=False)
        return sol.q[-1, 1]

    assert bool(jnp.isnan(jax.grad(final_height)(9.81)))

    def early_height(g):  # the same mechanism before the poison: finite gradient
        sol = jaxmbs.simulate(mech, q0, qd0, (0.0, 0.2), params={"g": g}, throw=False)
        return sol.q[-1, 1]

    assert bool(jnp.isfinite(jax.grad(early_height)(9.81)))


def test_throw_inside_jit_raises_the_cause():
    mech, q0, qd0 = _poisoned_pendulum()
    run = jax.jit(lambda q0: jaxmbs.simulate(mech, q0, qd0, (0.0, 1.0)).q)
    with pytest.raises(Exception, match="a step failed"):
        jax.block_until_ready(run(q0))


# ------------------------------------------------------------------------ invalid arguments


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"t_span": (0.0, np.nan)}, "t_span"),
        ({"t_span": (0.0, np.inf)}, "t_span"),
        ({"t_span": (1.0, 0.0)}, "t1 > t0"),
        ({"saveat": [0.0, np.nan, 1.0]}, "saveat"),
        ({"saveat": [0.0, 0.5, 0.2]}, "saveat must be non-decreasing"),
        ({"rtol": -1e-8}, "rtol"),
        ({"atol": np.nan}, "atol"),
        ({"rank_rtol": 1.5}, "rank_rtol"),
        ({"rank_rtol": 0.0}, "rank_rtol"),
        ({"max_steps": 0}, "max_steps"),
        ({"dt0": -0.01}, "dt0"),
        ({"params": {"m1": np.ones(3)}}, r"params\['m1'\] has shape"),
        ({"params": {"mass": 1.0}}, "does not have"),
        ({"params": {"m1": -1.0}}, "not positive definite"),
        ({"event": lambda t, y, args: 0.0}, "diffrax.Event"),
    ],
)
def test_invalid_arguments_named_before_compiling(kwargs, message):
    mech = fourbar.fourbar()
    q0, qd0 = fourbar.initial_state(mech)
    kwargs = {"t_span": (0.0, 1.0), **kwargs}
    t_span = kwargs.pop("t_span")
    with pytest.raises(ValueError, match=message):
        jaxmbs.simulate(mech, q0, qd0, t_span, **kwargs)


def test_partial_params_merge():
    """simulate(params=...) with some keys replaces only those, as monte_carlo does."""
    mech = fourbar.fourbar()
    q0, qd0 = fourbar.initial_state(mech)
    full = jaxmbs.simulate(mech, q0, qd0, (0.0, 0.2), params={**mech.params, "m2": 2.5})
    partial = jaxmbs.simulate(mech, q0, qd0, (0.0, 0.2), params={"m2": 2.5})
    np.testing.assert_allclose(partial.q, full.q, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"qd_guess": np.full(9, np.nan)}, "not finite"),
        ({"fixed": ("crank.psi",)}, "unknown coordinate"),
        ({"fixed": (12,)}, "out of range"),
    ],
)
def test_assemble_rejects_bad_guesses(kwargs, message):
    mech = fourbar.fourbar()
    q0, _ = fourbar.initial_state(mech)
    with pytest.raises(ValueError, match=message):
        jaxmbs.assemble(mech, np.asarray(q0), **kwargs)


# ------------------------------------------------------------------------ user events


def test_pendulum_event_at_the_vertical():
    """Released from rest at θ0 = 1 rad, a mathematical pendulum first passes the vertical
    after a quarter period K(sin²(θ0/2)) √(ρ/g) (complete elliptic integral of the first
    kind, parameter m = k²)."""
    mech = pendulum.mathematical_pendulum()
    q0, qd0 = pendulum.initial_state(mech, 1.0)
    quarter = scipy.special.ellipk(np.sin(0.5) ** 2) * np.sqrt(1.0 / 9.81)
    event = diffrax.Event(
        lambda t, y, params, **kwargs: y[0][0], root_finder=optx.Newton(rtol=1e-12, atol=1e-12)
    )
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, 2.0), event=event, rtol=1e-11, atol=1e-11)
    assert bool(sol.successful) and int(sol.event) == 0
    assert abs(float(sol.t_final) - quarter) < 1e-8
    assert abs(float(sol.q[-1, 0])) < 1e-9 and float(sol.qd[-1, 0]) < 0  # swinging left


@pytest.mark.parametrize(("direction", "quarters"), [(False, 1), (True, 3)])
def test_pendulum_event_direction(direction, quarters):
    """The same pendulum and condition x = 0 with `diffrax.Event(direction=...)`: x starts
    positive, so its down-crossing (direction=False) comes at a quarter period and its
    first up-crossing (direction=True) at three quarters, 3 K(sin²(θ0/2)) √(ρ/g); the
    down-crossing before it does not stop the run."""
    mech = pendulum.mathematical_pendulum()
    q0, qd0 = pendulum.initial_state(mech, 1.0)
    quarter = scipy.special.ellipk(np.sin(0.5) ** 2) * np.sqrt(1.0 / 9.81)
    event = diffrax.Event(
        lambda t, y, params, **kwargs: y[0][0],
        root_finder=optx.Newton(rtol=1e-12, atol=1e-12),
        direction=direction,
    )
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, 2.0), event=event, rtol=1e-11, atol=1e-11)
    assert float(q0[0]) > 0.8 and 3 * quarter < 2.0  # starts right; t1 is past both
    assert bool(sol.successful) and int(sol.event) == 0
    assert abs(float(sol.t_final) - quarters * quarter) < 1e-10  # measured 9e-13, 1.7e-12
    assert abs(float(sol.q[-1, 0])) < 1e-11
    assert (float(sol.qd[-1, 0]) > 0) == direction  # swinging right (up) or left (down)
