"""Reverse mode by the discrete adjoint (`jaxmbs.integrate.adjoint`): the derivative of the
integration on the forward run's accepted steps, the same as forward mode's (which
differentiates the same steps by tangents) to round-off, and as central differences to
their truncation error; independent of how the recorded steps are cut into segments; memory
that follows an explicit budget; the time of a failure with a NaN derivative by rule."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs
from jaxmbs.models import fourbar, pendulum, slider_crank

MECH = fourbar.fourbar()
Q0, QD0 = fourbar.initial_state(MECH)
TS = jnp.linspace(0.0, 1.0, 11)
NAMES = ("m2", "m3", "g")


def fourbar_run(x, t1=1.0, **options):
    """A loss that reads saved positions and velocities and the final state, and the run's
    statistics."""
    params = dict(zip(NAMES, x, strict=True))
    sol = jaxmbs.simulate(
        MECH, Q0, QD0, (0.0, t1), params=params, saveat=TS * t1, rtol=1e-10, atol=1e-10,
        **options,
    )  # fmt: skip
    return jnp.sum(sol.q[:, 2] ** 2) + 0.1 * jnp.sum(sol.qd[:, 0]) + sol.q[-1, 3], sol.stats


def fourbar_loss(x, t1=1.0, **options):
    return fourbar_run(x, t1, **options)[0]


X = jnp.array([2.0, 1.5, 9.81])


@pytest.fixture(scope="module")
def reverse_gradient():
    """(∂L/∂x, ∂L/∂t1) and the run's statistics."""
    return jax.jit(jax.grad(fourbar_run, argnums=(0, 1), has_aux=True))(X, 1.0)


def test_equals_forward_mode_and_central_differences(reverse_gradient):
    """∂L/∂(m2, m3, g) and ∂L/∂t1 (the last step ends at t1) by the adjoint against forward
    mode (1e-9 relative) and central differences (1e-6)."""
    forward = jax.jit(
        jax.jacfwd(lambda x, t1: fourbar_loss(x, t1, adjoint=diffrax.ForwardMode()), argnums=(0, 1))
    )(X, 1.0)
    loss = jax.jit(fourbar_loss)  # t1 always passed (traced): one program for all eight
    h = 1e-5
    points = [X + h * e for e in np.eye(3)] + [X - h * e for e in np.eye(3)]
    values = np.array([float(loss(p, 1.0)) for p in points])
    central = (values[:3] - values[3:]) / (2 * h)
    central_t1 = (float(loss(X, 1.0 + h)) - float(loss(X, 1.0 - h))) / (2 * h)
    (d_x, d_t1), _ = reverse_gradient
    reverse = np.append(np.asarray(d_x), float(d_t1))
    forward = np.append(np.asarray(forward[0]), float(forward[1]))
    central = np.append(central, central_t1)
    assert np.all(np.abs(reverse) > 1e-3)
    np.testing.assert_allclose(reverse, forward, rtol=1e-9)
    np.testing.assert_allclose(reverse, central, rtol=1e-6)


def test_segments_recompute_the_same_steps(reverse_gradient):
    """Segments of 4 steps (the run takes ~60: the earlier segments are recomputed from
    their checkpoints), in a gradient vmapped over two samples, one of them the same point,
    give the unbatched single-segment gradient to round-off (one program checks both the
    segments and the batching)."""
    (d_x, _), stats = reverse_gradient
    assert int(stats["num_accepted_steps"]) > 12
    batch = jnp.stack([X, X * jnp.array([1.1, 1.0, 0.9])])
    segmented = jax.jit(
        jax.vmap(jax.grad(lambda x: fourbar_loss(x, adjoint=jaxmbs.DiscreteAdjoint(4))))
    )(batch)
    np.testing.assert_allclose(segmented[0], d_x, rtol=1e-12)
    assert np.max(np.abs(np.asarray(segmented[1] - segmented[0]))) > 1e-3


@pytest.mark.parametrize(
    "options",
    [
        {"method": "partitioned"},
        {"method": "qr", "stabilization": "baumgarte"},
    ],
    ids=["partitioning-projection", "qr-baumgarte"],
)
def test_state_spaces_and_stabilisations(options):
    """Coordinate partitioning (with switches of the independent coordinate along 1.5 s of a
    fast crank) and Baumgarte's stabilisation: reverse = forward mode to 1e-9."""
    qd0 = 3.0 * QD0

    def loss(x, **more):
        params = dict(zip(NAMES, x, strict=True))
        sol = jaxmbs.simulate(
            MECH, Q0, qd0, (0.0, 1.5), params=params, saveat=TS * 1.5, rtol=1e-10, atol=1e-10,
            throw=False, **options, **more,
        )  # fmt: skip
        return jnp.sum(sol.q[:, 1] ** 2) + sol.qd[-1, 2], sol.stats

    reverse, stats = jax.jit(jax.grad(loss, has_aux=True))(X)
    if options["method"] == "partitioned":
        assert int(stats["num_switches"]) >= 2
    forward = jax.jit(jax.jacfwd(lambda x: loss(x, adjoint=diffrax.ForwardMode())[0]))(X)
    assert np.all(np.abs(np.asarray(forward)) > 1e-3)
    np.testing.assert_allclose(reverse, forward, rtol=1e-9)


def test_memory_follows_an_explicit_budget():
    """The compiled gradient's scratch memory grows by 8 bytes (one recorded step time) per
    step of `max_steps`, whatever the steps taken (the states are kept in segments of
    ~√max_steps): from 10⁴ to 10⁶ steps, at most 9 bytes per step more."""
    mech = pendulum.mathematical_pendulum()
    q0, qd0 = pendulum.initial_state(mech, 1.0)

    def scratch(max_steps):
        def loss(g):
            return jaxmbs.simulate(
                mech, q0, qd0, (0.0, 1.0), params={"g": g}, max_steps=max_steps
            ).q[-1, 0]

        compiled = jax.jit(jax.grad(loss)).lower(9.81).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    small, large = scratch(10_000), scratch(1_000_000)
    assert large - small <= 9 * (1_000_000 - 10_000), (small, large)


def test_time_of_a_failure_has_a_nan_derivative():
    """A slider-crank driven into its lock stops there (singular configuration): the stop's
    time is a step's end, a decision, so its derivative is NaN in either mode; an output
    before the stop (a reaction, which depends on the slider's mass) keeps a finite
    gradient equal to central differences."""
    mech = slider_crank.slider_crank(driven=True, r=0.6, L=0.5)
    q0, qd0 = slider_crank.initial_state(mech)
    ts = jnp.linspace(0.0, 0.1, 11)

    def run(mass):
        return jaxmbs.simulate(
            mech, q0, qd0, (0.0, 0.1), params={"m3": mass}, saveat=ts, throw=False,
            rtol=1e-10, atol=1e-10,
        )  # fmt: skip

    sol = run(0.8)
    assert bool(sol.result == jaxmbs.RESULTS.singular_configuration)
    assert 0.02 < float(sol.t_final) < 0.05

    def read(mass):
        sol = run(mass)
        return jnp.stack([sol.t_final, jnp.sum(sol.multipliers[1])])

    reverse = jax.jit(jax.jacrev(read))(0.8)
    assert np.isnan(float(reverse[0]))
    assert np.isnan(float(jax.jacfwd(lambda mass: run(mass).t_final)(0.8)))
    h = 1e-6
    central = float(jnp.sum(run(0.8 + h).multipliers[1] - run(0.8 - h).multipliers[1])) / (2 * h)
    assert abs(central) > 1e-3
    assert abs(float(reverse[1]) - central) < 1e-6 * abs(central)
