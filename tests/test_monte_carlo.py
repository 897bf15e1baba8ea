"""monte_carlo: chunked equals unchunked equals single runs; bad samples are flagged without
losing the others; sharding over two (virtual CPU) devices changes nothing; NPZ/CSV output."""

import csv
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_same_solve

import jaxmbs
from jaxmbs.integrate import RESULT_NAMES
from jaxmbs.models import fourbar

B = 8
T1 = 1.0
SAVEAT = np.linspace(0.0, T1, 5)
FIELDS = ("q", "qd", "qdd", "multipliers", "position_residual", "energy")


def response(sol):
    """Final crank angle and the peak reaction at the ground pivot A (rows 0, 1)."""
    return {
        "final_angle": sol.q[-1, 2],
        "peak_reaction_A": jnp.max(jnp.linalg.norm(sol.multipliers[:, :2], axis=1)),
    }


@pytest.fixture(scope="module")
def setup():
    mech = fourbar.fourbar()
    q0, unit_qd = fourbar.initial_state(mech, np.pi / 3, 1.0)  # q̇0 is linear in crank speed
    speeds = np.linspace(-4.0, 4.0, B)
    batch = {
        "q0": np.tile(np.asarray(q0), (B, 1)),
        "qd0": speeds[:, None] * np.asarray(unit_qd)[None, :],
        # g is batched too (constant) so that the bad-sample batch reuses the compilation.
        "params": {"m2": np.linspace(1.5, 2.5, B), "g": np.full(B, 9.81)},
    }
    return mech, batch


def run(mech, batch, **kwargs):
    return jaxmbs.monte_carlo(mech, batch, (0.0, T1), saveat=SAVEAT, response=response, **kwargs)


@pytest.fixture(scope="module")
def chunked(setup):
    return run(*setup, chunk_size=3)  # 3 chunks of 3, the last one padded


def test_chunked_equals_unchunked_vmapped_and_single_runs(setup, chunked):
    mech, batch = setup
    assert (chunked.chunk_size, chunked.n_chunks) == (3, 3)
    assert np.all(chunked.successful)
    whole = run(mech, batch, vectorize=True)  # chunked runs lax.map on CPU; this one vmaps
    assert (whole.chunk_size, whole.n_chunks) == (B, 1)
    # vmap runs batched LAPACK kernels, lax.map unbatched ones: equal to round-off (1e-12
    # relative to each field's scale; q̇ reaches 5 rad/s, λ hundreds of N).
    for field in FIELDS:
        a, b = getattr(chunked.solutions, field), getattr(whole.solutions, field)
        assert a.shape[0] == B
        assert np.max(np.abs(a - b)) <= 1e-12 * max(1.0, np.max(np.abs(b))), field
    for name in ("final_angle", "peak_reaction_A"):
        a, b = chunked.responses[name], whole.responses[name]
        assert np.max(np.abs(a - b)) <= 1e-12 * max(1.0, np.max(np.abs(b)))
    assert np.ptp(chunked.responses["final_angle"]) > 1.0  # the samples really differ
    for k in (0, B - 1):  # the first sample and the padded chunk's last real one
        params = {**mech.params, **{key: v[k] for key, v in batch["params"].items()}}
        single = jaxmbs.simulate(
            mech, batch["q0"][k], batch["qd0"][k], (0.0, T1), saveat=SAVEAT, params=params
        )
        assert_same_solve(
            chunked.solutions.q[k],
            chunked.diagnostics["num_steps"][k],
            single.q,
            single.stats["num_steps"],
            atol=1e-12,
            integration_atol=1e-7,
            what=f"chunked against single run, sample {k}",
        )


def test_bad_samples_are_flagged_and_the_others_intact(setup, chunked):
    mech, batch = setup
    bad = {
        "q0": batch["q0"].copy(),
        "qd0": batch["qd0"],
        "params": {key: value.copy() for key, value in batch["params"].items()},
    }
    bad["params"]["m2"][2] = np.nan  # NaN mass: M(q0) not finite
    bad["q0"][4, 0] += 0.01  # inconsistent start: |Φ(q0)| = 0.01
    bad["params"]["g"][6] = np.nan  # NaN forcing parameter: enters neither M nor Φ
    out = run(mech, bad, chunk_size=3)
    flagged = [2, 4, 6]
    good = [k for k in range(B) if k not in flagged]
    assert np.all(out.result[flagged] == RESULT_NAMES.index("inconsistent_initial_conditions"))
    assert np.all(out.result[good] == RESULT_NAMES.index("successful"))
    for field in FIELDS:
        a, b = getattr(out.solutions, field)[good], getattr(chunked.solutions, field)[good]
        assert np.max(np.abs(a - b)) <= 1e-12, field
    assert np.all(np.isnan(out.solutions.q[flagged]))
    stats = out.statistics
    assert stats["n_successful"] == len(good) and stats["failed"] == flagged
    assert stats["results"] == {"successful": 5, "inconsistent_initial_conditions": 3}
    # Statistics are over the successful samples only.
    angles = chunked.responses["final_angle"][good]
    summary = stats["responses"]["final_angle"]
    assert summary["count"] == 5
    assert abs(summary["mean"] - angles.mean()) <= 1e-12
    assert abs(summary["p95"] - np.percentile(angles, 95)) <= 1e-12
    assert abs(summary["max"] - angles.max()) <= 1e-12


def test_save_npz_and_csv(chunked, tmp_path):
    npz = np.load(chunked.save(tmp_path / "mc.npz"))
    np.testing.assert_allclose(npz["solution.q"], chunked.solutions.q, rtol=1e-12)
    np.testing.assert_allclose(npz["inputs.params.m2"], chunked.inputs["params.m2"], rtol=1e-12)
    np.testing.assert_allclose(
        npz["responses.final_angle"], chunked.responses["final_angle"], rtol=1e-12
    )
    assert json.loads(str(npz["statistics_json"]))["n_successful"] == B
    with open(chunked.save(tmp_path / "mc.csv")) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == B
    assert rows[3]["result_name"] == "successful"
    # Values written as text: equal to their arrays to the digits written.
    np.testing.assert_allclose(float(rows[3]["params.m2"]), chunked.inputs["params.m2"][3], 1e-12)
    np.testing.assert_allclose(float(rows[5]["qd0[2]"]), chunked.inputs["qd0"][5, 2], 1e-12)
    np.testing.assert_allclose(
        float(rows[7]["response.final_angle"]), chunked.responses["final_angle"][7], 1e-12
    )
    with pytest.raises(ValueError, match=r"\.npz or \.csv"):
        chunked.save(tmp_path / "mc.txt")


SHARDED = """
import json, jax, numpy as np
import helpers, jaxmbs
from jaxmbs.integrate import RESULT_NAMES
from jaxmbs.models import fourbar
helpers.collect_less()
assert jax.device_count() == 2, jax.devices()
mech = fourbar.fourbar()
q0, unit_qd = fourbar.initial_state(mech, np.pi / 3, 1.0)
speeds = np.linspace(-4.0, 4.0, 8)
m2 = np.linspace(1.5, 2.5, 8)
m2[5] = np.nan  # one bad sample on the second device
batch = {"qd0": speeds[:, None] * np.asarray(unit_qd)[None], "params": {"m2": m2}}
runs = [
    jaxmbs.monte_carlo(mech, batch, (0.0, 1.0), q0=q0, saveat=np.linspace(0, 1, 5),
                       devices=devices, chunk_size=4)
    for devices in (jax.devices(), jax.devices()[:1])
]
diff = max(float(np.nanmax(np.abs(getattr(runs[0].solutions, f) - getattr(runs[1].solutions, f))))
           for f in ("q", "qd", "qdd", "multipliers"))
print(json.dumps({"devices": [len(r.devices) for r in runs], "diff": diff,
                  "codes": [r.result.tolist() for r in runs]}))
"""


def test_sharded_equals_unsharded():
    """Two virtual CPU devices: the flag must be set before JAX starts, so a subprocess."""
    env = {
        **os.environ,
        # with the tests' compiler settings (conftest.py)
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2 "
        + os.environ.get("JAXMBS_TEST_XLA_FLAGS", ""),
        "JAX_ENABLE_X64": "1",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join(
            [os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]
        ),
    }
    done = subprocess.run(
        [sys.executable, "-c", SHARDED], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["devices"] == [2, 1]
    assert out["diff"] <= 1e-12
    expected = [0] * 8
    expected[5] = RESULT_NAMES.index("inconsistent_initial_conditions")
    assert out["codes"] == [expected, expected]


def test_process_share():
    batch = {"q0": np.arange(30.0).reshape(10, 3), "params": {"m": np.arange(10.0)}}
    shares = [jaxmbs.process_share(batch, i, 3) for i in range(3)]
    assert [s for _, s in shares] == [slice(0, 3), slice(3, 7), slice(7, 10)]
    assert np.array_equal(np.concatenate([b["q0"] for b, _ in shares]), batch["q0"])
    assert np.array_equal(np.concatenate([b["params"]["m"] for b, _ in shares]), np.arange(10.0))
    with pytest.raises(ValueError, match="process_index"):
        jaxmbs.process_share(batch, 3, 3)


def test_bad_arguments(setup):
    mech, batch = setup
    q0 = batch["q0"][0]
    with pytest.raises(ValueError, match="unknown batch keys"):
        jaxmbs.monte_carlo(mech, {"q": batch["q0"]}, (0.0, 1.0))
    with pytest.raises(ValueError, match="disagree on the number of samples"):
        jaxmbs.monte_carlo(mech, {**batch, "qd0": batch["qd0"][:3]}, (0.0, 1.0))
    with pytest.raises(ValueError, match="give qd0"):
        jaxmbs.monte_carlo(mech, {"q0": batch["q0"]}, (0.0, 1.0))
    with pytest.raises(ValueError, match=r"must have shape \(8, 9\)"):
        jaxmbs.monte_carlo(mech, {"q0": batch["q0"][:, :3], "qd0": batch["qd0"]}, (0.0, 1.0))
    with pytest.raises(ValueError, match=r"entries \['mass'\]"):
        jaxmbs.monte_carlo(mech, {"params": {"mass": np.ones(4)}}, (0.0, 1.0), q0=q0, qd0=q0)
    with pytest.raises(ValueError, match="sets 'throw' itself"):
        jaxmbs.monte_carlo(mech, batch, (0.0, 1.0), throw=True)
    with pytest.raises(ValueError, match="chunk_size"):
        jaxmbs.monte_carlo(mech, batch, (0.0, 1.0), chunk_size=0)
    with pytest.raises(ValueError, match="saveat"):
        jaxmbs.monte_carlo(mech, batch, (0.0, 1.0), saveat=[0.5, 2.0])
    with pytest.raises(ValueError, match="no leading sample axis"):
        jaxmbs.monte_carlo(mech, {"params": {"m2": 2.0}}, (0.0, 1.0), q0=q0, qd0=q0)


@pytest.fixture
def float32():
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", True)


def test_float32_batch(float32):
    mech = fourbar.fourbar()
    q0, unit_qd = fourbar.initial_state(mech, np.pi / 3, 1.0)
    speeds = np.linspace(1.0, 3.0, 4)
    out = jaxmbs.monte_carlo(
        mech,
        {"qd0": speeds[:, None] * np.asarray(unit_qd)[None]},
        (0.0, T1),
        q0=q0,
        saveat=SAVEAT,
        rtol=1e-5,
        atol=1e-5,
    )
    assert out.solutions.q.dtype == np.float32
    assert np.all(out.successful)
    # float32 round-off level (see experiments/float32_accuracy.py for the measured values).
    assert np.max(out.diagnostics["max_position_residual"]) < 1e-5
    assert np.max(out.diagnostics["energy_drift"]) < 1e-4
