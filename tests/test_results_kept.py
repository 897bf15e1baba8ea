"""Computed results are never lost: an output that cannot be written is refused by writing,
before anything compiles (`monte_carlo(save=)`, the command line's `--out`, `--plot`); a
write that fails after the run all the same only warns, and the results stay in the
returned object. The command line names the model file and the line that raised, and says
that a run refused at its initial state never started. A Monte Carlo study's labelled
dataset (computed for all samples at once) equals the datasets of its samples one by one."""

import errno
import importlib
import warnings

import jax
import numpy as np
import pytest

import jaxmbs
from jaxmbs import cli
from jaxmbs.batch.checkpoint import check_writable
from jaxmbs.models import spring_pendulum

MC_MODULE = importlib.import_module("jaxmbs.batch.monte_carlo")
#: Damping coefficients of the study: undamped (energy conserved), damped, and NaN (the
#: sample fails at its initial state).
DAMPING = np.array([0.0, 2.0, np.nan, 5.0])
SAVEAT = np.linspace(0.0, 0.2, 5)
#: A place no one can write, root included (os.access says yes there for root).
PROC = "/proc/jaxmbs-test-output"


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


@pytest.fixture
def no_samples(monkeypatch):
    """Fail the test if any chunk is traced or run."""

    def refuse(*args, **kwargs):
        raise AssertionError("a chunk ran before the arguments were refused")

    monkeypatch.setattr(MC_MODULE, "_run_chunk", refuse)


def no_space(*args, **kwargs):
    """A writer on a full disk."""
    raise OSError(errno.ENOSPC, "No space left on device")


# --- monte_carlo(save=) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "reason"),
    [("under_a_file", "Not a directory"), ("proc", "No such file or directory")],
)
def test_unwritable_save_is_refused_before_computing(mech, tmp_path, no_samples, where, reason):
    (tmp_path / "afile").write_text("a file, not a folder")
    path = tmp_path / "afile" / "out.npz" if where == "under_a_file" else f"{PROC}.npz"
    with pytest.raises(ValueError, match=f"cannot write save '{path}': {reason}"):
        study(mech, save=path)


def test_save_failing_after_the_run_keeps_the_results(mech, reference, tmp_path, monkeypatch):
    monkeypatch.setattr(MC_MODULE, "atomic_write", no_space)
    path = tmp_path / "study.npz"
    with pytest.warns(RuntimeWarning, match=f"could not write save='{path}': No space left"):
        out = study(mech, save=path)
    assert out.write_errors == {str(path): "No space left on device"}
    assert not path.exists()
    np.testing.assert_array_equal(out.result, reference.result)
    np.testing.assert_allclose(out.solutions.q, reference.solutions.q, rtol=1e-12, atol=1e-14)
    # ... and they can be written elsewhere afterwards
    monkeypatch.undo()
    out.save(tmp_path / "elsewhere.npz")
    np.testing.assert_array_equal(np.load(tmp_path / "elsewhere.npz")["result"], out.result)


def test_checkpoint_chunk_failing_to_write_keeps_the_results(
    mech, reference, tmp_path, monkeypatch
):
    monkeypatch.setattr(MC_MODULE.ChunkStore, "write", no_space)
    directory = tmp_path / "study"
    with pytest.warns(RuntimeWarning, match="could not write the checkpoint file") as record:
        out = study(mech, checkpoint_dir=directory, chunk_size=2)
    paths = [str(directory / name) for name in ("chunk-000000000-000000001.npz",
                                                 "chunk-000000002-000000003.npz")]  # fmt: skip
    assert out.write_errors == dict.fromkeys(paths, "No space left on device")
    messages = " ".join(str(warning.message) for warning in record)
    assert all(f"{path}: No space left on device" in messages for path in paths)
    np.testing.assert_array_equal(out.result, reference.result)
    np.testing.assert_allclose(out.solutions.q, reference.solutions.q, rtol=1e-12, atol=1e-14)


def test_a_successful_study_records_no_write_errors(mech, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = study(mech, save=tmp_path / "study.csv", checkpoint_dir=tmp_path / "study")
    assert out.write_errors == {}
    assert (tmp_path / "study.csv").exists()


def test_check_writable_leaves_files_as_they_were(tmp_path):
    existing = tmp_path / "existing.npz"
    existing.write_bytes(b"earlier results")
    check_writable(existing, "save")
    assert existing.read_bytes() == b"earlier results"
    check_writable(tmp_path / "new.npz", "save")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.npz"]  # nothing left over
    with pytest.raises(ValueError, match="cannot write save .*: it is a directory"):
        check_writable(tmp_path, "save")


# --- the command line --------------------------------------------------------------------------


def exit_status(argv) -> int:
    """`cli.main`'s status: its return value, or the code of the SystemExit it raises."""
    try:
        return cli.main(argv)
    except SystemExit as exit_:
        return 0 if exit_.code is None else exit_.code


@pytest.fixture
def no_simulation(monkeypatch):
    """Fail the test if the command line simulates anything."""

    def refuse(*args, **kwargs):
        raise AssertionError("the command line simulated before refusing its arguments")

    monkeypatch.setattr(jaxmbs, "simulate", refuse)


@pytest.mark.parametrize(
    ("flag", "where", "reason"),
    [
        ("--out", "proc", "No such file or directory"),
        ("--out", "under_a_file", "Not a directory"),
        ("--plot", "under_a_file", "Not a directory"),
    ],
)
def test_cli_unwritable_output_exits_2_before_the_run(
    capsys, tmp_path, no_simulation, flag, where, reason
):
    (tmp_path / "afile").write_text("a file, not a folder")
    suffix = ".csv" if flag == "--out" else ".png"
    path = tmp_path / "afile" / f"x{suffix}" if where == "under_a_file" else PROC + suffix
    assert exit_status(["simulate", "pendulum", flag, str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"jaxmbs: error: cannot write {flag} '{path}': {reason}\n"
    assert captured.out == ""


def test_cli_output_failing_after_the_run_exits_2_without_traceback(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(jaxmbs, "write_csv", no_space)
    path = tmp_path / "run.csv"
    assert (
        exit_status(["simulate", "pendulum", "--t1", "0.1", "--points", "3", "--out", str(path)])
        == 2
    )
    captured = capsys.readouterr()
    assert "result           successful" in captured.out  # the summary was printed first
    assert captured.err == (
        f"jaxmbs: error: could not write --out '{path}': No space left on device\n"
    )


MODEL_FILES = {
    "import": "import numpy\n\nMASS = 1 / 0\n",
    "factory": "def make():\n    mass = -1.0\n    raise RuntimeError(f'negative mass {mass}')\n",
    "syntax": "def make(:\n    pass\n",
}


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("import", "importing it raised ZeroDivisionError at line 3: division by zero"),
        ("factory", "calling make() raised RuntimeError at line 3: negative mass -1.0"),
        ("syntax", "importing it raised SyntaxError at line 1: "),
    ],
)
def test_cli_model_file_that_raises_exits_2_naming_the_file(capsys, tmp_path, kind, message):
    path = tmp_path / f"{kind}_model.py"
    path.write_text(MODEL_FILES[kind])
    for command in ("simulate", "analyze"):
        assert exit_status([command, f"{path}:make"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"jaxmbs: error: model file {path}: {message}"), err
        assert err.count("\n") == 1 and "Traceback" not in err


INCONSISTENT = """
from jaxmbs.models import pendulum


def make():
    mech = pendulum.physical_pendulum()
    q0, qd0 = pendulum.initial_state(mech, 1.0)
    return mech, q0 + 0.1, qd0  # violates the constraints
"""


def test_cli_run_refused_at_its_initial_state_never_started(capsys, tmp_path):
    path = tmp_path / "inconsistent.py"
    path.write_text(INCONSISTENT)
    argv = ["simulate", f"{path}:make", "--t1", "0.1", "--points", "3"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no all-NaN warnings from residuals it never had
        assert exit_status(argv) == 1
    out = capsys.readouterr().out
    assert "result           never started (at t0 = 0): inconsistent initial conditions" in out
    assert "failed at t" not in out and "max |Φ|" not in out


# --- MonteCarloResult.to_xarray ---------------------------------------------------------------


def test_study_dataset_equals_its_samples_datasets(mech, reference):
    """Computed for all samples at once, with each sample's parameters: the same variables
    as `jaxmbs.to_xarray` of every sample on its own (reactions, element forces, energy
    rate and whether energy is conserved), for a conserved, a damped and a failed sample."""
    xr = pytest.importorskip("xarray")
    ds = jaxmbs.monte_carlo_to_xarray(mech, reference, options={"rtol": 1e-8})
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
