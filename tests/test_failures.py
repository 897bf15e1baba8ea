"""The failure paths: a simulation that runs out of solver steps (raised or returned), the
command line's exit statuses, and a design optimisation stopped before convergence."""

import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from design_problem import X0, design_problem

import jaxmbs
from jaxmbs import cli
from jaxmbs.models import fourbar

MAX_STEPS = 5  # far too few for 1 s of the four-bar (it needs hundreds)


@pytest.fixture(scope="module")
def fourbar_state():
    mech = fourbar.fourbar()
    return (mech, *fourbar.initial_state(mech))


# --- max_steps_reached -----------------------------------------------------------------------


def test_max_steps_reached_raises_with_throw(fourbar_state):
    mech, q0, qd0 = fourbar_state
    with pytest.raises(RuntimeError, match="maximum number of solver steps was reached"):
        jaxmbs.simulate(mech, q0, qd0, (0.0, 1.0), max_steps=MAX_STEPS, throw=True)


def test_max_steps_reached_is_returned_without_throw(fourbar_state):
    mech, q0, qd0 = fourbar_state
    ts = jnp.linspace(0.0, 1.0, 5)
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, 1.0), saveat=ts, max_steps=MAX_STEPS, throw=False)
    assert bool(sol.result == jaxmbs.RESULTS.max_steps_reached)
    assert not bool(sol.successful)
    assert "maximum number of solver steps" in jaxmbs.RESULTS[sol.result]
    assert int(sol.stats["num_steps"]) == MAX_STEPS
    # The state at t = 0 is kept; the outputs past the stop are not finite.
    np.testing.assert_allclose(sol.q[0], q0, rtol=0, atol=1e-15)
    assert not np.any(np.isfinite(np.asarray(sol.q[1:])))
    # The same run with enough steps succeeds: the step limit, nothing else, stopped it.
    ok = jaxmbs.simulate(mech, q0, qd0, (0.0, 1.0), saveat=ts, throw=False)
    assert bool(ok.result == jaxmbs.RESULTS.successful)
    assert int(ok.stats["num_steps"]) > MAX_STEPS


# --- command-line exit statuses ----------------------------------------------------------------


def exit_status(argv) -> int:
    """`cli.main`'s status: its return value, or the code of the SystemExit it raises."""
    try:
        return cli.main(argv)
    except SystemExit as exit_:
        return 0 if exit_.code is None else exit_.code


def test_cli_success_returns_0(capsys):
    assert exit_status(["analyze", "fourbar"]) == 0
    status = exit_status(["simulate", "physical-pendulum", "--t1", "0.1", "--points", "3"])
    assert status == 0
    assert "result           successful" in capsys.readouterr().out
    assert exit_status(["--help"]) == 0


def test_cli_failed_simulation_returns_1(capsys, tmp_path):
    """A run that fails midway prints the cause and its time, writes the rows up to it."""
    out_csv = tmp_path / "run.csv"
    argv = ["simulate", "fourbar", "--t1", "1", "--points", "101", "--max-steps", "40",
            "--out", str(out_csv)]  # fmt: skip
    assert exit_status(argv) == 1
    out = capsys.readouterr().out
    assert "maximum number of solver steps was reached" in out
    assert "steps            40 " in out
    t_fail = float(out.split("failed at t = ")[1].split(":")[0])
    assert 0.0 < t_fail < 1.0
    times = np.loadtxt(out_csv, delimiter=",", skiprows=1, ndmin=2)[:, 0]
    assert times.max() <= t_fail and times.max() > t_fail - 0.0101  # every row up to it
    np.testing.assert_allclose(np.diff(times), 0.01, rtol=1e-9)


def test_cli_unwritable_output_exits_2_before_the_run(capsys, tmp_path):
    missing = tmp_path / "no-such-folder" / "run.csv"
    assert exit_status(["simulate", "fourbar", "--out", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxmbs: error: cannot write") and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["simulate", "no-such-model"], "unknown model 'no-such-model'"),
        (["analyze", "no-such-model"], "unknown model 'no-such-model'"),
        (["simulate", "fourbar", "--no-such-option"], "unrecognized arguments"),
        (["simulate", "fourbar", "--method", "lu"], "invalid choice: 'lu'"),
        (["simulate", "fourbar", "--t1", "-1"], "--t1: must be positive"),
        (["simulate", "fourbar", "--t1", "0"], "--t1: must be positive"),
        (["simulate", "fourbar", "--t1", "nan"], "--t1: must be positive"),
        (["simulate", "fourbar", "--t1", "soon"], "--t1: invalid float value"),
        (["simulate", "chain", "--links", "0"], "--links: must be at least 1"),
        (["analyze", "chain", "--links", "-2"], "--links: must be at least 1"),
        (["simulate", "chain", "--links", "two"], "--links: invalid int value"),
        (["simulate", "fourbar", "--max-steps", "0"], "--max-steps: must be at least 1"),
        ([], "required: command"),
    ],
)
def test_cli_bad_arguments_exit_with_2(argv, message, capsys):
    """Rejected by argparse (usage message, status 2) before anything runs: no traceback, and
    the float64 setting untouched."""
    before = jax.config.jax_enable_x64
    assert exit_status(argv) == 2
    assert message in capsys.readouterr().err
    assert jax.config.jax_enable_x64 == before


def test_command_exit_status_of_the_process():
    """`python -m jaxmbs` exits with main's status (here argparse's 2 for a bad --t1)."""
    done = subprocess.run(
        [sys.executable, "-m", "jaxmbs", "simulate", "fourbar", "--t1", "-1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=pathlib.Path(__file__).parents[1],  # this checkout's jaxmbs
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--t1: must be positive" in done.stderr
    assert "Traceback" not in done.stderr


# --- optimisation stopped before convergence ---------------------------------------------------


@pytest.fixture(scope="module")
def stopped_optimisation():
    """BFGS on the design problem of test_optimize.py, stopped after 2 steps (it needs ~30)."""
    loss = design_problem()[3]
    return jaxmbs.optimize(loss, jnp.asarray(X0), max_steps=2)


def test_optimisation_stopped_early_is_not_converged(stopped_optimisation):
    out = stopped_optimisation
    assert out.converged is False
    assert out.num_steps == 2 and len(out.history["loss"]) == 2
    assert np.sqrt(out.loss) > 1e-6  # far from the optimum (1e-8 m RMS when converged)
    assert np.max(np.abs(out.x)) > 1e-3  # the design is not the true one (x = 0)


def test_optimisation_stopped_early_says_so_in_its_message(stopped_optimisation):
    message = stopped_optimisation.message
    assert message.startswith("did not converge") and "max_steps" in message, message
