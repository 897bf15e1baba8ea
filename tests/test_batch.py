"""vmap over initial conditions equals the loop of single runs; one bad sample is flagged
without losing the others."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs
from jaxmbs.models import fourbar


@pytest.fixture(scope="module")
def setup():
    mech = fourbar.fourbar()
    q0, unit_qd = fourbar.initial_state(mech, np.pi / 3, 1.0)

    @jax.jit
    def final_state(speed):
        sol = jaxmbs.simulate(
            mech, q0, speed * unit_qd, (0.0, 1.0), saveat=jnp.array([0.5, 1.0]), throw=False
        )
        return sol.q, sol.result

    return final_state


def test_vmap_equals_loop(setup):
    speeds = jnp.linspace(-4.0, 4.0, 64)
    q_batch, codes = jax.jit(jax.vmap(setup))(speeds)
    assert q_batch.shape == (64, 2, 9)
    assert bool(jnp.all(codes == jaxmbs.RESULTS.successful))
    q_loop = jnp.stack([setup(s)[0] for s in speeds])
    assert float(jnp.max(jnp.abs(q_batch - q_loop))) < 1e-12
    assert float(jnp.ptp(q_batch[:, -1, 2])) > 1.0  # the samples differ


def test_bad_sample_does_not_lose_the_batch(setup):
    speeds = jnp.array([1.0, jnp.nan, -2.0])
    q_batch, codes = jax.vmap(setup)(speeds)
    names = [jaxmbs.integrate.RESULT_NAMES[i] for i in jaxmbs.integrate.result_index(codes)]
    assert names == ["successful", "inconsistent_initial_conditions", "successful"]
    assert float(jnp.max(jnp.abs(q_batch[0] - setup(1.0)[0]))) < 1e-12
    assert float(jnp.max(jnp.abs(q_batch[2] - setup(-2.0)[0]))) < 1e-12
