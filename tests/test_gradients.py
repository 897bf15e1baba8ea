"""Reverse-mode gradients through a 2 s simulation against central finite differences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs
from jaxmbs.models import fourbar

TOL = 1e-12  # integration tolerance: finite differences need a smooth, accurate solve


@pytest.fixture(scope="module")
def setup():
    mech = fourbar.fourbar()
    q0, unit_qd = fourbar.initial_state(mech, np.pi / 3, 1.0)  # q̇0 is linear in the crank speed
    return mech, q0, unit_qd


def final_crank_angle(mech, q0, unit_qd, method):
    def f(m2, speed):
        params = {**mech.params, "m2": m2}
        sol = jaxmbs.simulate(
            mech, q0, speed * unit_qd, (0.0, 2.0), params=params, method=method, rtol=TOL, atol=TOL
        )
        return sol.q[-1, 2]

    return f


@pytest.mark.parametrize("method", ["qr", "kkt"])
def test_gradient_matches_central_differences(setup, method):
    mech, q0, unit_qd = setup
    f = final_crank_angle(mech, q0, unit_qd, method)
    m2, speed = 2.0, 2.0
    grad = jax.jit(jax.grad(f, argnums=(0, 1)))(m2, speed)
    f_jit = jax.jit(f)
    h = 1e-4
    fd_mass = (f_jit(m2 + h, speed) - f_jit(m2 - h, speed)) / (2 * h)
    fd_speed = (f_jit(m2, speed + h) - f_jit(m2, speed - h)) / (2 * h)
    for g, fd in zip(grad, (fd_mass, fd_speed), strict=True):
        assert abs(float(fd)) > 1e-3  # a real dependence, not a trivially zero derivative
        assert abs(float(g - fd)) < 1e-6 * abs(float(fd)), (float(g), float(fd))
    assert jnp.isfinite(grad[0])
