"""Forward-mode differentiation (jax.jvp, jax.jacfwd) through `simulate`: chosen
automatically with the default adjoint, refused with a hint for a reverse-mode one."""

import diffrax
import jax
import numpy as np
import pytest

import jaxmbs
from jaxmbs.models import fourbar


@pytest.fixture(scope="module")
def final_state():
    mech = fourbar.fourbar()
    q0, unit_qd = fourbar.initial_state(mech, np.pi / 3, 1.0)

    def run(speed, adjoint=None):
        sol = jaxmbs.simulate(
            mech, q0, speed * unit_qd, (0.0, 0.5), rtol=1e-12, atol=1e-12, adjoint=adjoint
        )
        return sol.q[-1]

    return run


def test_jacfwd_chooses_forward_mode(final_state):
    jac = np.asarray(jax.jacfwd(final_state)(2.0))
    h = 1e-4
    fd = (np.asarray(final_state(2.0 + h)) - np.asarray(final_state(2.0 - h))) / (2 * h)
    assert np.max(np.abs(fd)) > 0.1
    np.testing.assert_allclose(jac, fd, rtol=1e-6, atol=1e-8)


def test_jvp_through_a_reverse_mode_adjoint_says_what_to_pass(final_state):
    checkpointed = diffrax.RecursiveCheckpointAdjoint()
    with pytest.raises(TypeError, match=r"pass adjoint=diffrax.ForwardMode\(\)"):
        jax.jvp(lambda s: final_state(s, checkpointed), (2.0,), (1.0,))
