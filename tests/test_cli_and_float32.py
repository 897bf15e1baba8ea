"""The command line writes CSV/PNG and a summary; float32 runs with float32 accuracy."""

import csv

import jax
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
    assert rows[0][:4] == ["t", "q[x]", "q[y]", "q[gamma]"]
    assert len(rows) == 12
    np.testing.assert_allclose([float(r[0]) for r in rows[1:]], np.linspace(0, 1, 11), rtol=1e-12)
    assert fig.stat().st_size > 10_000


@pytest.mark.parametrize(
    "x64, flags",
    [(True, ["--float32", "--rtol", "1e-5", "--atol", "1e-5"]), (False, [])],
    ids=["float64-session-float32-run", "float32-session-float64-run"],
)
def test_main_restores_the_float64_setting(x64, flags, capsys):
    """`main` switches float64 on or off for its run and back when it returns, so calling it
    in a process (as these tests do) leaves the rest of the session as it was."""
    jax.config.update("jax_enable_x64", x64)
    try:
        before = jax.config.jax_enable_x64
        argv = ["simulate", "physical-pendulum", "--t1", "0.1", "--points", "3", *flags]
        assert cli.main(argv) == 0
        assert ("float32" if flags else "float64") in capsys.readouterr().out
        assert jax.config.jax_enable_x64 == before == x64
    finally:
        jax.config.update("jax_enable_x64", True)


@pytest.mark.parametrize("x64, flags", [(True, ["--float32"]), (False, [])])
def test_main_restores_the_float64_setting_when_the_command_raises(x64, flags, monkeypatch):
    seen = []

    def fail(args):
        seen.append(jax.config.jax_enable_x64)
        raise RuntimeError("command failed")

    monkeypatch.setattr(cli, "simulate_command", fail)
    jax.config.update("jax_enable_x64", x64)
    try:
        with pytest.raises(RuntimeError, match="command failed"):
            cli.main(["simulate", "physical-pendulum", *flags])
        assert seen == [not flags]  # the command ran with the setting asked for
        assert jax.config.jax_enable_x64 == x64
    finally:
        jax.config.update("jax_enable_x64", True)


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
    # float32 accuracy: residuals at the level of its round-off (measured 6e-8), energy to
    # 1e-4 (measured drift 3.7e-5: float32 round-off in E = T + V accumulated over the run).
    assert float(jnp.max(sol.position_residual)) < 1e-5
    drift = np.max(np.abs(np.asarray(sol.energy) / float(sol.energy[0]) - 1))
    assert drift < 1e-4


def test_float32_assembly_is_consistent_for_simulate(float32):
    """In float32, Newton's default tolerance 1000 ε max(1, |q|) is ~2e-4 for the McPherson
    strut; assembly goes on to round-off, so `simulate` (consistency_tol 1e-6) accepts it."""
    mech = mcpherson.mcpherson_simplified()
    q0, qd0 = mcpherson.initial_state(mech, 0.05)
    assert q0.dtype == jnp.float32
    phi = jaxmbs.position_residual(mech, q0, 0.0, mech.params)
    assert float(jnp.max(jnp.abs(phi))) <= 1e-6
    c = jaxmbs.velocity_residual(mech, q0, qd0, 0.0, mech.params)
    assert float(jnp.max(jnp.abs(c))) <= 1e-6
