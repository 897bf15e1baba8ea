"""monte_carlo with checkpoint_dir: a run killed after its first chunk and resumed equals an
uninterrupted run, each chunk computed once; two processes under jax.distributed equal one;
a directory of another study and invalid output arguments are refused before any sample
runs.

The study below also runs in subprocesses (`python -c "... main(...)"`), which import this
module by the same name, so that its response function has the same fingerprint there."""

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import collect_less

import jaxmbs
from jaxmbs.models import fourbar

B = 24
CHUNK = 4
T1 = 2.0
SAVEAT = np.linspace(0.0, T1, 11)
TESTS = str(Path(__file__).parent)
# The module (its name in jaxmbs.batch is the function).
MC_MODULE = importlib.import_module("jaxmbs.batch.monte_carlo")
LOOPBACK = "127.0.0.1"
#: What gRPC writes when the coordinator's port was taken between `free_port` and its bind.
PORT_TAKEN = "Failed to add port to server"


def response(sol):
    """Final crank angle."""
    return {"final_angle": sol.q[-1, 2]}


def study(**kwargs):
    """The study's arguments; `kwargs` override them."""
    mech = fourbar.fourbar()
    q0, unit_qd = fourbar.initial_state(mech, np.pi / 3, 1.0)
    batch = {
        "qd0": np.linspace(-4.0, 4.0, B)[:, None] * np.asarray(unit_qd)[None],
        "params": {"m2": np.linspace(1.5, 2.5, B)},
    }
    args = {"q0": q0, "saveat": SAVEAT, "response": response, "chunk_size": CHUNK}
    return (mech, batch, (0.0, T1)), {**args, **kwargs}


def run(**kwargs) -> jaxmbs.MonteCarloResult:
    args, options = study(**kwargs)
    return jaxmbs.monte_carlo(*args, **options)


def main(directory: str, port: int | None = None, process_id: int = 0) -> None:
    """Run the study into `directory` (in a subprocess); with `port`, as one of two
    processes of jax.distributed on the loopback interface (the coordinator binds there
    only, not to every address of the machine as by default)."""
    collect_less()
    jax.config.update("jax_enable_x64", True)
    if port is not None:
        address = f"{LOOPBACK}:{port}"
        jax.distributed.initialize(
            address,
            num_processes=2,
            process_id=process_id,
            coordinator_bind_address=address,
            initialization_timeout=120,
        )
        print("initialized", flush=True)
    out = run(checkpoint_dir=directory, save=str(Path(directory).parent / "combined.npz"))
    print(json.dumps({"computed": out.chunks_computed, "loaded": out.chunks_loaded}))


def subprocess_env() -> dict[str, str]:
    """The children compile with the tests' XLA settings (conftest.py) and no others: the
    same programs as the reference's."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    flags = os.environ.get("JAXMBS_TEST_XLA_FLAGS", "")
    return {**env, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu", "PYTHONPATH": TESTS}


def command(*args) -> list[str]:
    call = f"main({', '.join(map(repr, args))})"
    return [sys.executable, "-c", f"from test_monte_carlo_checkpoint import main; {call}"]


def chunk_files(directory: Path) -> dict[str, tuple[int, int]]:
    """Chunk file name → (inode, modification time), to see that none is written twice."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in directory.glob("chunk-*.npz")}


def recorded_chunk_files(directory: Path) -> dict[str, tuple[int, int]]:
    """`chunk_files` of the chunks whose checksum record was written too: finished ones."""
    files = chunk_files(directory)
    return {k: v for k, v in files.items() if (directory / k).with_suffix(".sha256").exists()}


def assert_same(a: jaxmbs.MonteCarloResult, b: jaxmbs.MonteCarloResult) -> None:
    """Bit-for-bit equal outputs (the same compiled program on the same samples)."""
    np.testing.assert_array_equal(a.result, b.result)
    np.testing.assert_array_equal(a.responses["final_angle"], b.responses["final_angle"])
    for name, values in a.diagnostics.items():
        np.testing.assert_array_equal(values, b.diagnostics[name], err_msg=name)
    for field in ("q", "qd", "multipliers", "energy"):
        np.testing.assert_array_equal(getattr(a.solutions, field), getattr(b.solutions, field))
    assert a.statistics == b.statistics


@pytest.fixture(scope="module")
def reference():
    """One uninterrupted run in one process, without checkpoints."""
    out = run()
    assert np.all(out.successful) and out.n_chunks == B // CHUNK
    return out


@pytest.fixture(scope="module")
def finished(tmp_path_factory, reference):
    """A finished study's checkpoint directory."""
    directory = tmp_path_factory.mktemp("finished") / "study"
    out = run(checkpoint_dir=directory)
    assert out.chunks_computed == tuple(range(B // CHUNK)) and out.chunks_loaded == ()
    assert_same(out, reference)
    return directory


@pytest.fixture
def no_samples(monkeypatch):
    """Fail the test if any chunk is traced or run."""

    def refuse(*args, **kwargs):
        raise AssertionError("a chunk ran before the arguments were refused")

    monkeypatch.setattr(MC_MODULE, "_run_chunk", refuse)


def test_finished_study_is_read_not_computed(finished, reference):
    before = chunk_files(finished)
    assert len(before) == B // CHUNK
    again = run(checkpoint_dir=finished)
    assert again.chunks_computed == () and again.chunks_loaded == tuple(range(B // CHUNK))
    assert again.timings["first_chunk_s"] is None
    assert chunk_files(finished) == before
    assert_same(again, reference)


def test_killed_run_resumes_to_the_uninterrupted_result(tmp_path, reference):
    directory = tmp_path / "study"
    child = subprocess.Popen(
        command(str(directory)),
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not any(directory.glob("chunk-*.sha256")):
        assert child.poll() is None, (
            f"the study ended before its first chunk: {child.stderr.read()}"
        )
        assert time.monotonic() < deadline, "no chunk file after 300 s"
        time.sleep(0.002)
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    before = recorded_chunk_files(directory)  # a chunk killed before its record: computed again
    n_chunks = B // CHUNK
    assert 1 <= len(before) < n_chunks, sorted(before)
    resumed = run(checkpoint_dir=directory)
    loaded = {f"chunk-{k * CHUNK:09d}-{(k + 1) * CHUNK - 1:09d}.npz" for k in resumed.chunks_loaded}
    assert loaded == set(before)  # every finished chunk read back, none recomputed ...
    assert sorted(resumed.chunks_computed + resumed.chunks_loaded) == list(range(n_chunks))
    assert {k: v for k, v in chunk_files(directory).items() if k in before} == before
    assert len(chunk_files(directory)) == n_chunks  # ... and every other one computed once
    assert_same(resumed, reference)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def loopback_refused() -> str | None:
    """Why this machine refuses TCP on its loopback interface (a sandbox without a network
    stack, where JAX's distributed runtime cannot start), or None when a connection there
    succeeds."""
    try:
        with (
            socket.create_server((LOOPBACK, 0)) as server,
            socket.create_connection(server.getsockname(), timeout=10),
        ):
            pass
    except OSError as err:
        return f"{type(err).__name__}: {err}"
    return None


def run_two_processes(directory: Path, logs: Path) -> list[tuple[int, str, str]]:
    """`main` in two processes under jax.distributed: (return code, stdout, stderr) of each.
    Output goes to files (a pipe left unread could block a child). When one process fails
    the other is killed: it would wait for its partner until its initialization timeout."""
    env = {k: v for k, v in subprocess_env().items() if "proxy" not in k.lower()}  # local
    port, children = free_port(), []
    files = [(logs / f"out-{port}-{i}.txt", logs / f"err-{port}-{i}.txt") for i in range(2)]
    for i, (out, err) in enumerate(files):
        with open(out, "w") as stdout, open(err, "w") as stderr:
            children.append(
                subprocess.Popen(
                    command(str(directory), port, i), env=env, stdout=stdout, stderr=stderr
                )
            )
    try:
        deadline = time.monotonic() + 300
        while any(child.poll() is None for child in children):
            if any(child.poll() not in (None, 0) for child in children):
                break
            assert time.monotonic() < deadline, "the two processes ran for over 300 s"
            time.sleep(0.05)
    finally:
        for child in children:
            child.kill()
            child.wait()
    return [
        (child.returncode, out.read_text(), err.read_text())
        for child, (out, err) in zip(children, files, strict=True)
    ]


def test_two_processes_equal_one(tmp_path, reference):
    """Skipped only where the machine refuses TCP on its loopback interface; any other
    failure of the distributed runtime fails the test. The coordinator's port, free when
    chosen, can be taken by another program before the coordinator binds it: then the
    processes start again on another port (at most three tries)."""
    reason = loopback_refused()
    if reason is not None:
        pytest.skip(f"the loopback interface refuses TCP, which jax.distributed needs: {reason}")
    directory = tmp_path / "study"
    for _ in range(3):
        outs = run_two_processes(directory, tmp_path)
        if PORT_TAKEN not in outs[0][2]:
            break
    report = "\n".join(
        f"process {i}: exit code {code}, initialized: {out.startswith('initialized')}, "
        f"stderr:\n{err[-2000:]}"
        for i, (code, out, err) in enumerate(outs)
    )
    assert all(code == 0 and out.startswith("initialized") for code, out, _ in outs), report
    counts = [json.loads(out.strip().splitlines()[-1]) for _, out, _ in outs]
    computed = [c["computed"] for c in counts]
    assert computed == [[0, 1, 2], [3, 4, 5]]  # contiguous halves of the 6 chunks
    assert [c["loaded"] for c in counts] == [[3, 4, 5], [0, 1, 2]]
    combined = np.load(tmp_path / "combined.npz")  # written by process 0, in sample order
    np.testing.assert_array_equal(combined["result"], reference.result)
    np.testing.assert_array_equal(combined["solution.q"], reference.solutions.q)
    np.testing.assert_array_equal(combined["solution.multipliers"], reference.solutions.multipliers)
    np.testing.assert_array_equal(
        combined["responses.final_angle"], reference.responses["final_angle"]
    )
    np.testing.assert_array_equal(
        combined["diagnostics.num_steps"], reference.diagnostics["num_steps"]
    )
    assert json.loads(str(combined["statistics_json"])) == json.loads(
        json.dumps(reference.statistics)
    )


@pytest.mark.parametrize(
    ("change", "part"),
    [
        ({"q0": "perturbed"}, "inputs"),
        ({"saveat": np.linspace(0.0, T1, 12)}, "times"),
        ({"rtol": 1e-6}, "options"),
        ({"response": lambda sol: sol.q[-1, 2]}, "options"),
        ({"keep_solutions": False}, "options"),
        ({"chunk_size": CHUNK + 1}, "chunks"),
    ],
)
def test_changed_argument_is_refused_before_computing(finished, no_samples, change, part):
    before = chunk_files(finished)
    if change.get("q0") == "perturbed":
        args, _ = study()
        q0, _ = fourbar.initial_state(args[0], np.pi / 3 + 1e-9, 1.0)
        change = {"q0": q0}
    with pytest.raises(ValueError, match=f"different study: its .*{part}.* differ"):
        run(checkpoint_dir=finished, **change)
    assert chunk_files(finished) == before


def test_chunk_file_of_another_study_is_refused_before_computing(finished, no_samples, tmp_path):
    """A chunk file copied from another study's directory, with its checksum record, is
    never read as this one's (`on_damaged_chunk="raise"`; by default it is computed again)."""
    other = tmp_path / "other"
    other.mkdir()
    name = sorted(chunk_files(finished))[1]
    for file in (Path(name), Path(name).with_suffix(".sha256")):
        (other / file).write_bytes((finished / file).read_bytes())
    with pytest.raises(ValueError, match=f"{name} its checksum record .* is of another study"):
        run(checkpoint_dir=other, rtol=1e-6, on_damaged_chunk="raise")


def test_invalid_output_arguments_are_refused_before_computing(tmp_path, no_samples):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ValueError, match=r"\.npz or \.csv"):
        run(save=tmp_path / "mc.txt")
    with pytest.raises(ValueError, match="directory .* does not exist"):
        run(save=tmp_path / "missing" / "mc.npz")
    with pytest.raises(ValueError, match="save must be a path"):
        run(save=3)
    with pytest.raises(ValueError, match="exists and is not a directory"):
        run(checkpoint_dir=tmp_path / "file")
    with pytest.raises(ValueError, match="checkpoint_dir must be a path"):
        run(checkpoint_dir=3)
    with pytest.raises(ValueError, match="manifest.json is of format 'something else'"):
        (tmp_path / "other").mkdir()
        (tmp_path / "other" / "manifest.json").write_text('{"format": "something else"}')
        run(checkpoint_dir=tmp_path / "other")
    assert not list(tmp_path.rglob("chunk-*")) and not list(tmp_path.rglob("*.npz"))
