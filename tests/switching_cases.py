"""Shared by test_partitioning_switching.py and test_partitioning_switching_mcpherson.py:
partitioning with switching against `qr`, both at the same tight tolerance."""

import jax.numpy as jnp
import numpy as np

import jaxmbs

TOL = 1e-12


def compare_with_qr(mech, q0, qd0, t1, independent, **kwargs):
    """`simulate` by coordinate partitioning (with switching) from `independent` against
    `qr`, both at TOL, at 21 output times over (0, t1)."""
    ts = jnp.linspace(0.0, t1, 21)
    common = dict(saveat=ts, rtol=TOL, atol=TOL, **kwargs)
    reference = jaxmbs.simulate(mech, q0, qd0, (0.0, t1), method="qr", **common)
    method = jaxmbs.PartitionedCoordinates(independent=independent)
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, t1), method=method, **common)
    assert bool(sol.successful) and bool(reference.successful)
    # measured: q 1.6e-10, 4.1e-10, 2.1e-12; q̇ 1.0e-9, 3.8e-9, 5.1e-12 (the tests in order)
    np.testing.assert_allclose(sol.q, reference.q, atol=1e-8)
    np.testing.assert_allclose(sol.qd, reference.qd, atol=1e-8)
    return sol
