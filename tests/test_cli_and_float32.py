"""The command line writes CSV/PNG and a summary; float32 runs with float32 accuracy."""

import csv

import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs
from jaxmbs import cli
from jaxmbs.models import MODELS, fourbar, mcpherson


def test_simulate_command_writes_outputs(tmp_path, capsys):
    out, fig = tmp_path / "pendulum.csv", tmp_path / "pendulum.png"
    code = cli.main(
        [
            "simulate",
            "physical-pendulum",
            "--t1",
            "1.0",
            "--points",
            "11",
            "--out",
            str(out),
            "--plot",
            str(fig),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "dof = 1" in text and "successful" in text and "energy drift" in text
    with open(out) as f:
        rows = list(csv.reader(f))
    assert rows[0][:4] == ["t", "x", "y", "gamma"]
    assert len(rows) == 12 and float(rows[-1][0]) == 1.0
    assert fig.stat().st_size > 10_000


def test_help_lists_models_and_methods(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    for name in [*MODELS, *jaxmbs.METHODS]:
        assert name in text


def test_float32_runs(float32):
    mech = fourbar.fourbar()
    q0, qd0 = fourbar.initial_state(mech)
    assert q0.dtype == jnp.float32
    sol = jaxmbs.simulate(
        mech, q0, qd0, (0.0, 2.0), rtol=1e-5, atol=1e-5, saveat=jnp.linspace(0, 2, 11)
    )
    assert sol.q.dtype == jnp.float32 and bool(sol.result == jaxmbs.RESULTS.successful)
    # float32 accuracy: residuals at the level of its round-off, energy to ~1e-5.
    assert float(jnp.max(sol.position_residual)) < 1e-5
    drift = np.max(np.abs(np.asarray(sol.energy) / float(sol.energy[0]) - 1))
    assert drift < 1e-4


def test_float32_assembly_is_consistent_for_simulate(float32):
    """In float32, Newton's default tolerance 1000 ε max(1, |q|) is ~2e-4 for the McPherson
    strut; assembly goes on to round-off, so `simulate` (consistency_tol 1e-6) accepts it."""
    mech = mcpherson.mcpherson_simplified()
    q0, qd0 = mcpherson.initial_state(mech, 0.05)
    assert q0.dtype == jnp.float32
    phi = jaxmbs.position_residual(mech, 0.0, q0, mech.params)
    assert float(jnp.max(jnp.abs(phi))) <= 1e-6
    c = jaxmbs.velocity_residual(mech, 0.0, q0, qd0, mech.params)
    assert float(jnp.max(jnp.abs(c))) <= 1e-6
