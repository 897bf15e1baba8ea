"""The design-optimisation example shared by test_optimize.py and test_failures.py: a four-bar
coupler-point curve to be matched by tuning two lengths and two masses.

The loss runs without stabilisation and rank check to keep compilation short (projection
under reverse mode is covered by test_gradients.py); over 1.5 s at rtol 1e-10 the
constraint drift stays far below the tolerances asserted in the tests. The set-up is built
once per session.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

import jaxmbs
from jaxmbs.model.joints import planar
from jaxmbs.models import fourbar

NAMES = ("l2", "l3", "m2", "m3")
COUPLER_POINT = (0.1, 0.12)  # in the coupler frame, off the line of its joints
TS = np.linspace(0.0, 1.5, 31)
SOLVE = {"rtol": 1e-10, "atol": 1e-10, "stabilization": "none", "rank_rtol": None}
X0 = np.array([-0.12, 0.12, 0.2, -0.2])  # log-scale design error: lengths ±12 %, masses ±20 %


def observe(t, q, qd, p):
    return planar.point(q, 1, jnp.asarray(COUPLER_POINT))


@functools.cache
def design_problem():
    """(mechanism, x ↦ params, params ↦ consistent (q0, q̇0), x ↦ loss); the loss is zero at
    x = 0, the true design."""
    mech = fourbar.fourbar()
    q_ref, qd_ref = fourbar.initial_state(mech, np.pi / 3, 2.0)
    nominal = {k: float(v) for k, v in mech.params.items()}

    def to_params(x):
        return {**nominal, **{k: nominal[k] * jnp.exp(x[i]) for i, k in enumerate(NAMES)}}

    def initial_state(p):
        return jaxmbs.consistent_state(mech, q_ref, qd_ref, params=p, fixed=("crank.phi",))

    truth = jaxmbs.simulate(mech, q_ref, qd_ref, (0.0, TS[-1]), saveat=TS, **SOLVE)
    target = jax.vmap(observe, in_axes=(0, 0, 0, None))(truth.ts, truth.q, truth.qd, None)
    loss_of_params = jaxmbs.trajectory_loss(mech, initial_state, observe, TS, target, **SOLVE)
    return mech, to_params, initial_state, lambda x: loss_of_params(to_params(x))
