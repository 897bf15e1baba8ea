"""A Monte Carlo study's labelled dataset (computed for all samples at once) equals the
datasets of its samples one by one."""

import jax
import numpy as np
import pytest

import jaxmbs
from jaxmbs.models import spring_pendulum

#: Damping coefficients of the study: undamped (energy conserved), damped, and NaN (the
#: sample fails at its initial state).
DAMPING = np.array([0.0, 2.0, np.nan, 5.0])
SAVEAT = np.linspace(0.0, 0.2, 5)


@pytest.fixture(scope="module")
def mech():
    return spring_pendulum.spring_pendulum(k=200.0, c=2.0)  # soft: not stiff


def study(mech, **kwargs) -> jaxmbs.MonteCarloResult:
    q0, qd0 = spring_pendulum.initial_state(mech)
    batch = {"params": {"c": DAMPING}}
    return jaxmbs.monte_carlo(mech, batch, (0.0, 0.2), q0=q0, qd0=qd0, saveat=SAVEAT, **kwargs)


@pytest.fixture(scope="module")
def reference(mech):
    return study(mech)


# --- MonteCarloResult.to_xarray ---------------------------------------------------------------


def test_study_dataset_equals_its_samples_datasets(mech, reference):
    """Computed for all samples at once, with each sample's parameters: the same variables
    as `jaxmbs.to_xarray` of every sample on its own (reactions, element forces, energy
    rate and whether energy is conserved), for a conserved, a damped and a failed sample."""
    xr = pytest.importorskip("xarray")
    ds = reference.to_xarray(mech, options={"rtol": 1e-8})
    assert ds.sizes["sample"] == len(DAMPING) and ds.q.dims == ("sample", "time", "coordinate")
    assert list(ds.energy_conserved.values[[0, 1, 3]]) == [1, 0, 0]  # undamped, damped
    assert any(name.startswith("element_force.") for name in ds.data_vars)
    for b, c in enumerate(DAMPING):
        solution = jax.tree_util.tree_map(lambda x, b=b: np.asarray(x)[b], reference.solutions)
        one = jaxmbs.to_xarray(mech, solution, params={**mech.params, "c": c})
        assert set(one.data_vars) <= set(ds.data_vars)
        for name, variable in one.data_vars.items():
            mine = ds[name].isel(sample=b)
            assert mine.dims == variable.dims and mine.dtype == variable.dtype, name
            if variable.dtype.kind == "f":
                np.testing.assert_allclose(
                    mine.values, variable.values, rtol=1e-12, atol=1e-12, err_msg=name
                )
            else:
                np.testing.assert_array_equal(mine.values, variable.values, err_msg=name)
        xr.testing.assert_equal(ds.time, one.time)
    assert bool(np.all(np.isnan(ds.q.values[2])))
    np.testing.assert_array_equal(ds["input.params.c"].values, DAMPING)
