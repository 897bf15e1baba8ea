"""The CLI with a user's own mechanism factory (`path/to/file.py:function`) and with JAX's
persistent compilation cache."""

import os
import subprocess
import sys

import pytest

from jaxmbs.cli import main

FACTORY = """
from jaxmbs.models import pendulum


def make():
    mech = pendulum.physical_pendulum()
    return (mech, *pendulum.initial_state(mech, 1.0))


def wrong():
    return 42
"""


@pytest.fixture
def factory_file(tmp_path):
    path = tmp_path / "my_model.py"
    path.write_text(FACTORY)
    return path


def test_simulate_a_users_factory(factory_file, tmp_path, capsys):
    out = tmp_path / "run.csv"
    code = main(
        ["simulate", f"{factory_file}:make", "--t1", "0.5", "--points", "6", "--out", str(out)]
    )
    assert code == 0
    assert "result           successful" in capsys.readouterr().out
    assert len(out.read_text().splitlines()) == 7  # a header and one row per output time


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no-such-model", "unknown model"),
        ("{file}:missing", "has no function missing"),
        ("{file}:wrong", "must return (mechanism, q0, qd0)"),
        ("{dir}/absent.py:make", "does not exist"),
    ],
)
def test_bad_model_specs_exit_2_with_the_reason(factory_file, spec, message, capsys):
    spec = spec.format(file=factory_file, dir=factory_file.parent)
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", spec, "--t1", "0.5"])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_persistent_compilation_cache_is_written(tmp_path):
    cache = tmp_path / "xla"
    env = {k: v for k, v in os.environ.items() if k != "JAXMBS_CACHE_DIR"}
    command = [
        sys.executable,
        "-m",
        "jaxmbs",
        "simulate",
        "pendulum",
        "--t1",
        "0.2",
        "--points",
        "3",
    ]
    run = subprocess.run([*command, "--cache", str(cache)], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert cache.is_dir() and any(cache.iterdir())  # compiled programs were stored
