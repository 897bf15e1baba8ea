"""A checkpoint directory proves its contents: every chunk file is checked against the
SHA-256 its writer recorded beside it. A chunk file that was rewritten with other values,
truncated, emptied, bit-flipped, copied from another study or left without its record is
computed again with a warning naming the file and why (or refused, naming them, with
`on_damaged_chunk="raise"`); a broken manifest is refused naming the manifest and what is
wrong; a study whose options differ is refused naming the options."""

import importlib
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import jaxmbs
from jaxmbs.batch.checkpoint import FORMAT, ChunkStore
from jaxmbs.models import pendulum

B = 6
CHUNK = 2
SAVEAT = np.linspace(0.0, 0.3, 4)
MC_MODULE = importlib.import_module("jaxmbs.batch.monte_carlo")
#: The second of the three chunks (samples 2 and 3), the one the tests damage.
NAME = "chunk-000000002-000000003"


def run(directory: Path, **kwargs) -> jaxmbs.MonteCarloResult:
    mech = pendulum.physical_pendulum()
    q0, qd0 = pendulum.initial_state(mech, 1.0)
    batch = {"params": {"m": np.linspace(1.0, 2.0, B)}}
    options = {"q0": q0, "qd0": qd0, "saveat": SAVEAT, "chunk_size": CHUNK, **kwargs}
    return jaxmbs.monte_carlo(mech, batch, (0.0, 0.3), checkpoint_dir=directory, **options)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, jaxmbs.MonteCarloResult]:
    """A finished study's checkpoint directory and its result."""
    directory = tmp_path_factory.mktemp("finished") / "study"
    out = run(directory)
    assert out.chunks_computed == (0, 1, 2) and np.all(out.successful)
    return directory, out


@pytest.fixture
def study(finished, tmp_path) -> Path:
    """A copy of the finished study's directory, to damage."""
    copy = tmp_path / "study"
    shutil.copytree(finished[0], copy)
    return copy


def refuse(*args, **kwargs):
    raise AssertionError("a chunk ran before the arguments were refused")


@pytest.fixture
def no_samples(monkeypatch):
    """Fail the test if any chunk is traced or run."""
    monkeypatch.setattr(MC_MODULE, "_run_chunk", refuse)


def rewrite_with_other_values(directory: Path) -> None:
    """A valid NPZ file of the same study and samples, with other values."""
    path = directory / f"{NAME}.npz"
    with np.load(path) as f:
        arrays = {name: f[name] for name in f.files}
    arrays["solution.q"] = arrays["solution.q"] + 0.5
    np.savez(path, **arrays)


def truncate(directory: Path) -> None:
    path = directory / f"{NAME}.npz"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def empty(directory: Path) -> None:
    (directory / f"{NAME}.npz").write_bytes(b"")


def flip_a_bit(directory: Path) -> None:
    path = directory / f"{NAME}.npz"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def remove_the_record(directory: Path) -> None:
    """As when the writer was killed between writing the chunk and its record."""
    (directory / f"{NAME}.sha256").unlink()


def break_the_record(directory: Path) -> None:
    (directory / f"{NAME}.sha256").write_text('{"sha256": ')


def copy_from_another_study(directory: Path) -> None:
    """The chunk file and its record of a study with other options."""
    other = directory.parent / "other"
    run(other, rtol=1e-6)
    for suffix in (".npz", ".sha256"):
        shutil.copy(other / f"{NAME}{suffix}", directory / f"{NAME}{suffix}")


DAMAGES = {
    rewrite_with_other_values: "holds other bytes than were written",
    truncate: "holds other bytes than were written",
    empty: "holds other bytes than were written",
    flip_a_bit: "holds other bytes than were written",
    remove_the_record: f"has no checksum record {NAME}.sha256",
    break_the_record: f"its checksum record {NAME}.sha256 cannot be read",
    copy_from_another_study: f"its checksum record {NAME}.sha256 is of another study",
}


@pytest.mark.parametrize("damage", list(DAMAGES), ids=[d.__name__ for d in DAMAGES])
def test_damaged_chunk_is_computed_again_with_a_warning(finished, study, damage):
    damage(study)
    path = study / f"{NAME}.npz"
    with pytest.warns(RuntimeWarning, match=f"{path} {DAMAGES[damage]}") as record:
        out = run(study)
    assert [str(w.message) for w in record if str(path) in str(w.message)][0].endswith(
        "computing its samples 2 … 3 again"
    )
    assert out.chunks_computed == (1,) and out.chunks_loaded == (0, 2)
    reference = finished[1]
    np.testing.assert_array_equal(out.result, reference.result)
    np.testing.assert_allclose(out.solutions.q, reference.solutions.q, rtol=1e-12, atol=1e-14)
    with warnings.catch_warnings():  # the file computed again is sound, and read back
        warnings.simplefilter("error")
        again = run(study)
    assert again.chunks_computed == () and again.chunks_loaded == (0, 1, 2)


@pytest.mark.parametrize("damage", list(DAMAGES), ids=[d.__name__ for d in DAMAGES])
def test_damaged_chunk_is_refused_on_request(study, damage, monkeypatch):
    damage(study)
    monkeypatch.setattr(MC_MODULE, "_run_chunk", refuse)  # nothing runs before the refusal
    path = study / f"{NAME}.npz"
    with pytest.raises(ValueError, match=f"checkpoint file {path} {DAMAGES[damage]}"):
        run(study, on_damaged_chunk="raise")


def test_chunk_missing_after_the_other_processes_finished(finished, study):
    """What a process reads after the barrier: the chunks the others wrote."""
    digests = json.loads((study / "manifest.json").read_text())["fingerprint"]
    names = ["result", "solution.q"]
    (study / f"{NAME}.npz").unlink()
    store = ChunkStore(study, digests, on_damaged="recompute")
    with pytest.warns(RuntimeWarning, match=f"{study / NAME}.npz is missing"):
        assert store.read(2, 4, names) is None
    with pytest.raises(ValueError, match=f"{study / NAME}.npz is missing"):
        ChunkStore(study, digests, on_damaged="raise").read(2, 4, names)
    np.testing.assert_array_equal(store.read(0, 2, names)["result"], finished[1].result[:2])


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "cannot be read: Expecting value"),
        ('{"format": ', "cannot be read: Expecting value"),
        ("[1, 2]", "holds a JSON list, not an object"),
        ('{"format": "something else"}', "is of format 'something else'"),
        (json.dumps({"format": FORMAT}), "has no valid fingerprint"),
        (json.dumps({"format": FORMAT, "fingerprint": [1]}), "has no valid fingerprint"),
    ],
)
def test_broken_manifest_is_refused_naming_it(study, no_samples, text, problem):
    manifest = study / "manifest.json"
    manifest.write_text(text)
    with pytest.raises(ValueError, match=f"checkpoint manifest {manifest} {problem}"):
        run(study)


def test_unreadable_manifest_bytes_are_refused_naming_it(study, no_samples):
    manifest = study / "manifest.json"
    manifest.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match=f"checkpoint manifest {manifest} cannot be read"):
        run(study)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"rtol": 1e-6}, "options.rtol"),
        ({"rtol": 1e-6, "atol": 1e-6}, "options.atol, options.rtol"),
        ({"saveat": np.linspace(0.0, 0.3, 5)}, "times.saveat"),
        ({"keep_solutions": False}, "options.keep_solutions"),
        ({"chunk_size": 3}, "chunks.chunk_size"),
    ],
)
def test_changed_option_is_refused_naming_it(study, no_samples, change, named):
    with pytest.raises(ValueError, match=f"different study: its {named} differ"):
        run(study, **change)


def test_on_damaged_chunk_is_checked(study, no_samples):
    with pytest.raises(ValueError, match="on_damaged_chunk must be one of"):
        run(study, on_damaged_chunk="ignore")
