"""One integration core: every option works with every method (a small cross-product).

Methods: a formulation in all coordinates (`qr`, `banded`) and coordinate partitioning with
switching (`partitioning`), on the four-bar and on the redundant four-bar. Each case sets a
different combination of solver, step-size controller, stabilisation, rank check, progress
meter, saveat and user event; every run must succeed and agree with a tight `qr` reference.
"""

import functools

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs
from jaxmbs.models import fourbar

T1 = 0.6
TS = jnp.linspace(0.0, T1, 7)


@functools.cache
def setup(redundant: bool):
    mech = fourbar.fourbar(redundant=redundant)
    q0, qd0 = fourbar.initial_state(mech)
    reference = jaxmbs.simulate(mech, q0, qd0, (0.0, T1), saveat=TS, rtol=1e-12, atol=1e-12)
    return mech, q0, qd0, reference


def _crank_below(angle):
    """Event condition: the crank angle (coordinate 2) crosses `angle`."""
    return lambda t, y, params, **kwargs: y[0][2] - angle


CASES = {
    # stabilisation, solver, controller, rank check, progress meter
    "none-dopri5-pid": dict(
        stabilization="none",
        solver=diffrax.Dopri5(),
        stepsize_controller=diffrax.PIDController(rtol=1e-9, atol=1e-9),
        progress_meter=diffrax.TextProgressMeter(minimum_increase=0.5),
    ),
    "baumgarte-tsit5-norank": dict(
        stabilization=jaxmbs.Baumgarte(alpha=5.0, beta=5.0),
        rtol=1e-9,
        atol=1e-9,
        rank_rtol=None,
        max_steps=5000,
    ),
    "projection-dopri8-constant": dict(
        stabilization="projection",
        solver=diffrax.Dopri8(),
        stepsize_controller=diffrax.ConstantStepSize(),
        dt0=T1 / 300,
    ),
}


#: An all-pairs design over (option case, method, mechanism): every case with every method,
#: and each of them on both four-bars (9 runs, not the 18 of the full grid; the method is
#: what meets the redundant rows, and each method runs on both mechanisms).
PAIRS = [
    ("none-dopri5-pid", "qr", False),
    ("none-dopri5-pid", "banded", True),
    ("none-dopri5-pid", "partitioned", False),
    ("baumgarte-tsit5-norank", "qr", True),
    ("baumgarte-tsit5-norank", "banded", False),
    ("baumgarte-tsit5-norank", "partitioned", True),
    ("projection-dopri8-constant", "qr", False),
    ("projection-dopri8-constant", "banded", True),
    ("projection-dopri8-constant", "partitioned", True),
]


@pytest.mark.parametrize(
    ("case", "method", "redundant"),
    PAIRS,
    ids=[f"{c}-{m}-{'redundant' if r else 'fourbar'}" for c, m, r in PAIRS],
)
def test_options_by_method(redundant, method, case, record_property):
    mech, q0, qd0, reference = setup(redundant)
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, T1), saveat=TS, method=method, **CASES[case])
    assert bool(sol.successful) and sol.method == method
    np.testing.assert_allclose(sol.q, reference.q, atol=2e-6)
    np.testing.assert_allclose(sol.qdd, reference.qdd, rtol=1e-4, atol=1e-4)
    # Cᵀλ (unique even with redundant rows) balances M q̈ − Q like the reference's.
    C = jax.vmap(lambda q: jaxmbs.constraint_jacobian(mech, q, 0.0, mech.params))(sol.q)
    reaction = jnp.einsum("tkn,tk->tn", C, sol.multipliers)
    C_ref = jax.vmap(lambda q: jaxmbs.constraint_jacobian(mech, q, 0.0, mech.params))(reference.q)
    reaction_ref = jnp.einsum("tkn,tk->tn", C_ref, reference.multipliers)
    record_property("max_abs_error_q", float(jnp.max(jnp.abs(sol.q - reference.q))))
    record_property("max_abs_error_qdd", float(jnp.max(jnp.abs(sol.qdd - reference.qdd))))
    record_property("max_abs_error_reaction", float(jnp.max(jnp.abs(reaction - reaction_ref))))
    record_property("max_position_residual", float(jnp.max(sol.position_residual)))
    np.testing.assert_allclose(reaction, reaction_ref, rtol=1e-3, atol=1e-3)
    if case != "baumgarte-tsit5-norank":  # Baumgarte damps drift, does not remove it
        assert float(jnp.max(sol.position_residual)) < 1e-6


@pytest.mark.parametrize("method", ["qr", "partitioned"])
def test_event_saveat_none_and_throw_false(method):
    """A user event with saveat=None ends the run at the crossing; throw=False, same result."""
    mech, q0, qd0, _ = setup(False)
    target = float(q0[2]) - 0.5  # the crank rises to 1.13 rad, then falls through it
    event = diffrax.Event(_crank_below(target), root_finder=jaxmbs_root_finder())
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, T1), method=method, event=event, throw=False)
    assert bool(sol.successful) and int(sol.event) == 0
    assert float(sol.t_final) < T1 and sol.ts.shape == (1,)
    np.testing.assert_allclose(sol.ts[0], sol.t_final)
    np.testing.assert_allclose(sol.q[0, 2], target, atol=1e-8)


def jaxmbs_root_finder():
    import optimistix as optx

    return optx.Newton(rtol=1e-10, atol=1e-10)


def test_forward_mode_gradient_partitioning():
    """ForwardMode through the switching core: d q(T)/d m2 against central differences."""
    mech, q0, qd0, _ = setup(False)

    def final_angle(m2):
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, 0.3), params={"m2": m2}, method="partitioned",
            rtol=1e-11, atol=1e-11, adjoint=diffrax.ForwardMode(),
        )  # fmt: skip
        return sol.q[-1, 5]

    m2 = jnp.asarray(2.0)
    grad = jax.jacfwd(final_angle)(m2)
    h = 1e-5
    fd = (final_angle(m2 + h) - final_angle(m2 - h)) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-9)


def test_the_design_covers_every_pair():
    """PAIRS holds every (case, method), (case, mechanism) and (method, mechanism) pair."""
    levels = (list(CASES), ["qr", "banded", "partitioned"], [False, True])
    for a, b in ((0, 1), (0, 2), (1, 2)):
        covered = {(run[a], run[b]) for run in PAIRS}
        assert covered == {(x, y) for x in levels[a] for y in levels[b]}, (a, b)
