"""Reverse mode on a long adaptive run over a rough road, and through runs stopped by
events: it must give forward mode's gradient. Before reverse mode kept the forward run's
steps (`jaxmbs.integrate.adjoint`), the checkpointed adjoint's recomputation drifted from the
forward run's steps (last-bit differences of the recompiled steps, amplified by the error
estimate) and the rough-road gradient was 1e-3 and 4e-2 relative off in two components."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

import jaxmbs
from jaxmbs.model.joints import forces, planar
from jaxmbs.models import chain, pendulum

Q0 = np.array([0.0, 0.8, 0.0, 0.0, 0.3, 0.0])
PARAMS = {
    "k": 2e4, "c": 1.5e3, "free_length": 0.5, "k_tyre": 2e5, "c_tyre": 200.0,
    "sharpness": 1e-4, "tyre_height": 0.3, "speed": 12.0,
}  # fmt: skip


def rough_road(seed: int = 7) -> jaxmbs.Profile:
    """z_road(x) over 20 m at 5 cm: flat for 8 m, then a 6 mm-RMS random section."""
    x = np.arange(0.0, 20.0, 0.05)
    noise = np.convolve(np.random.default_rng(seed).normal(size=x.size), np.ones(6) / 6, "same")
    return jaxmbs.Profile(x, 0.006 * noise / noise.std() * np.clip((x - 8.0) / 0.5, 0.0, 1.0))


def two_mass_car(road: jaxmbs.Profile) -> jaxmbs.Mechanism:
    """A sprung and an unsprung mass on vertical rails, a spring-damper between them and a
    tyre (one-sided, smooth lift-off) on the road passed at `speed`."""
    motion = road.along("speed")

    def tyre(t, q, qd, p):
        deflection = motion(t, p) + p["tyre_height"] - q[4]
        rate = jax.jvp(lambda t_: motion(t_, p), (t,), (jnp.ones_like(t),))[1] - qd[4]
        law = forces.one_sided("k_tyre", 0.0, "c_tyre", "sharpness")
        return jnp.zeros(6).at[4].set(law(deflection, rate, p))

    strut = forces.SpringDamper(
        "strut", stiffness="k", damping="c", free_length="free_length",
        body_i=1, point_i=(0.0, 0.0), body_j=0, point_j=(0.0, 0.0),
    )  # fmt: skip
    rails = [
        planar.Translational("sprung", None, (0.0, 0.0), (0.0, 1.0), 0),
        planar.Translational("unsprung", None, (0.0, 0.0), (0.0, 1.0), 1),
    ]
    bodies = [planar.Body("sprung", 300.0, 10.0), planar.Body("unsprung", 40.0, 1.0)]
    mech = planar.planar_mechanism(
        bodies, rails, PARAMS, elements=[strut], applied_forces=tyre
    )  # fmt: skip
    return mech.with_structure(Q0)


def test_reverse_mode_equals_forward_mode_on_a_rough_road(record_property):
    mech = two_mass_car(rough_road())
    ts = np.linspace(0.0, 1.5, 151)

    def loss(x, **options):
        params = {"k": x[0], "c": x[1], "free_length": x[2]}
        sol = jaxmbs.simulate(
            mech, Q0, np.zeros(6), (0.0, 1.5), saveat=ts, params=params, rtol=1e-10,
            atol=1e-10, stabilization="none", **options,
        )  # fmt: skip
        return jnp.sum(sol.q[-1] ** 2) + 1e-3 * jnp.sum(sol.q**2), sol.stats

    x = jnp.array([2e4, 1.5e3, 0.5])
    # Reverse mode's forward pass is the run itself: its statistics come with the gradient.
    (_, stats), reverse = jax.jit(jax.value_and_grad(loss, has_aux=True))(x)
    assert int(stats["num_rejected_steps"]) > 500  # the rough road: many rejected steps
    forward = jax.jit(jax.jacfwd(lambda x: loss(x, adjoint=diffrax.ForwardMode())[0]))(x)
    error = np.max(np.abs(np.asarray(reverse - forward) / np.asarray(forward)))
    record_property("relative_difference", float(error))
    assert error < 1e-6, (reverse, forward)


def test_reverse_mode_through_events_equals_forward_mode():
    """A run stopped by an event: reverse mode retakes the steps up to the stop, and output
    times past it pass nothing back. A boolean event stops at a step's end (output times
    after it are NaN); one with a root finder at the root, whose time depends on g (diffrax's
    own adjoint differentiates it)."""
    mech = pendulum.mathematical_pendulum()
    q0, qd0 = pendulum.initial_state(mech, 1.0)
    ts = jnp.linspace(0.0, 2.0, 21)
    crossing = diffrax.Event(lambda t, y, params, **kwargs: y[0][0] < 0)
    root = diffrax.Event(
        lambda t, y, params, **kwargs: y[0][0], root_finder=optx.Newton(rtol=1e-12, atol=1e-12)
    )

    def early(g, **options):  # outputs at 0.2 and 0.3 s, before the stop at ~0.54 s
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, 2.0), saveat=ts, params={"g": g}, event=crossing,
            rtol=1e-11, atol=1e-11, **options,
        )  # fmt: skip
        return sol.q[3, 1] + sol.qd[2, 0]

    def at_root(g, **options):  # the time of the vertical and the speed there
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, 2.0), params={"g": g}, event=root, rtol=1e-11, atol=1e-11,
            **options,
        )  # fmt: skip
        return sol.t_final + sol.qd[-1, 0]

    for f in (early, at_root):
        # One program for the gradient and the values of the central difference (reverse
        # mode's forward pass is the run itself, with the same adjoint as a plain run).
        value_and_grad = jax.jit(jax.value_and_grad(f))
        reverse = float(value_and_grad(9.81)[1])
        forward = float(jax.jit(jax.jacfwd(f))(9.81))
        central = float((value_and_grad(9.81 + 1e-4)[0] - value_and_grad(9.81 - 1e-4)[0]) / 2e-4)
        assert abs(reverse - forward) < 1e-9 * abs(forward), (f.__name__, reverse, forward)
        assert abs(reverse - central) < 1e-6 * abs(central), (f.__name__, reverse, central)


def test_reverse_mode_before_a_singular_stop_equals_forward_mode(record_property):
    """A run the rank check stops (a 3-link chain swinging from 0.6 rad; a rank tolerance of
    0.7 of the largest pivot counts it singular at t ≈ 0.48 s): the adjoint retakes the
    recorded steps and ends where the run ended. Outputs before the stop get forward mode's
    gradient; a loss that reads an output past it has a NaN gradient in either mode."""
    mech = chain.chain(3)
    q0, qd0 = chain.initial_state(mech, 0.6)
    ts = jnp.linspace(0.0, 1.0, 11)

    def outputs(g):
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, 1.0), saveat=ts, params={**mech.params, "g": g},
            rank_rtol=0.7, rtol=1e-11, atol=1e-11, throw=False,
        )  # fmt: skip
        return sol.q, sol.result, sol.t_final

    def losses(g):  # early: outputs 0.1–0.4 s; late: also the output at 0.6 s, NaN
        q = outputs(g)[0]
        early = jnp.sum(q[1:5] ** 2)
        return jnp.stack([early, q[6, 0] + early])

    def early_loss(g):
        """losses(g)[0], with the run's result and end (reverse mode's forward pass is the
        run itself)."""
        q, result, t_final = outputs(g)
        return jnp.sum(q[1:5] ** 2), (result, t_final)

    reverse, (result, t_final) = jax.jit(jax.grad(early_loss, has_aux=True))(9.81)
    reverse = float(reverse)
    assert bool(result == jaxmbs.RESULTS.singular_configuration)
    assert 0.4 < float(t_final) < 0.5  # outputs 0–0.4 s before the stop, 0.5–1 s after

    # Forward mode: both losses' derivatives from one program (one input, one tangent).
    forward, forward_late = (float(d) for d in jax.jit(jax.jacfwd(losses))(9.81))
    record_property("relative_difference", abs(reverse - forward) / abs(forward))
    assert abs(forward) > 1e-3
    assert abs(reverse - forward) < 1e-9 * abs(forward), (reverse, forward)
    assert bool(jnp.isnan(jax.jit(jax.grad(lambda g: losses(g)[1]))(9.81)))
    assert np.isnan(forward_late)
