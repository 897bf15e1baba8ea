"""Computed results are never lost: an output that cannot be written is refused by writing,
before anything compiles (`monte_carlo(save=)`); a write that fails after the run all the
same only warns, and the results stay in the returned object. A Monte Carlo study's labelled
dataset (computed for all samples at once) equals the datasets of its samples one by one."""

import errno
import importlib
import warnings

import jax
import numpy as np
import pytest

import jaxmbs
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
