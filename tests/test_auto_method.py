"""`method="auto"` (the default): the formulation chosen from the static structure."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs
from jaxmbs.formulations import choose_formulation
from jaxmbs.models import chain, fourbar, mobile_robot, pendulum


@pytest.mark.parametrize(
    "build",
    [
        pendulum.physical_pendulum,  # small, dense
        lambda: fourbar.fourbar(redundant=True),  # redundant rows
        mobile_robot.mobile_robot,  # Pfaffian rows
        lambda: chain.chain(50),  # a long chain
    ],
    ids=["small-dense", "redundant", "pfaffian", "chain-50"],
)
def test_auto_chooses_banded_where_the_sparsity_is_known(build):
    mech = build()
    assert mech.structure.sparsity is not None
    assert choose_formulation(mech).name == "banded"


def test_auto_falls_back_to_qr_without_sparsity_or_constraints():
    mech = fourbar.fourbar()
    dense = mech.replace_structure(dataclasses.replace(mech.structure, sparsity=None))
    assert choose_formulation(dense).name == "qr"
    free = jaxmbs.Mechanism(
        lambda q, p: jnp.eye(2), lambda t, q, qd, p: -q, reference_q=jnp.array([1.0, 0.0])
    )
    assert choose_formulation(free).name == "qr"
    with pytest.raises(ValueError, match="unknown method"):
        jaxmbs.formulations.get_formulation("automatic", mech)


def test_default_simulate_reports_its_choice_and_agrees_with_qr():
    mech = pendulum.physical_pendulum()
    q0, qd0 = pendulum.initial_state(mech, 1.0)
    ts = jnp.linspace(0.0, 2.0, 21)
    auto = jaxmbs.simulate(mech, q0, qd0, (0.0, 2.0), saveat=ts, rtol=1e-10, atol=1e-10)
    qr = jaxmbs.simulate(mech, q0, qd0, (0.0, 2.0), saveat=ts, rtol=1e-10, atol=1e-10, method="qr")
    assert auto.method == "banded" and qr.method == "qr"
    np.testing.assert_allclose(auto.q, qr.q, atol=1e-9)
    assert np.max(np.abs(np.asarray(auto.q[-1] - auto.q[0]))) > 0.1  # it moved


def test_reverse_gradient_through_the_default_matches_qr():
    """The README's gradient: the default (`banded`) path transposes its linear solve even
    where part of the right-hand side (Γ) does not depend on the parameters."""
    mech = pendulum.mathematical_pendulum()
    q0, qd0 = pendulum.initial_state(mech, 1.0)

    def height(p, method):
        return jaxmbs.simulate(mech, q0, qd0, (0.0, 1.0), params=p, method=method).q[-1, 1]

    auto = jax.grad(height)(mech.params, "auto")
    qr = jax.grad(height)(mech.params, "qr")
    for key in ("g", "rho"):
        assert abs(float(qr[key])) > 1e-3
        assert abs(float(auto[key]) - float(qr[key])) < 1e-9 * abs(float(qr[key]))
