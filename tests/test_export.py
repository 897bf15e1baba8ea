"""Results people can look at, keep and share: labelled datasets (netCDF), named CSV
columns, animations and snapshots, from the library and the command line."""

import csv
import shutil

import numpy as np
import pytest

import jaxmbs
from jaxmbs import cli
from jaxmbs.model.joints import spatial
from jaxmbs.models import fourbar, spring_pendulum

xr = pytest.importorskip("xarray")
pytest.importorskip("h5netcdf")
pytest.importorskip("matplotlib")
Image = pytest.importorskip("PIL.Image")

TS = np.linspace(0.0, 1.0, 11)


@pytest.fixture(scope="module")
def fourbar_run():
    mech = fourbar.fourbar()
    q0, qd0 = fourbar.initial_state(mech)
    return mech, jaxmbs.simulate(mech, q0, qd0, (0.0, 1.0), saveat=TS)


def assert_same_dataset(a, b):
    """Every variable and coordinate stored exactly (a round trip of stored data), and the
    same attributes."""
    assert set(a.variables) == set(b.variables)
    for name in a.variables:
        assert a[name].dims == b[name].dims, name
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)
    assert a.attrs.keys() == b.attrs.keys()
    for key, value in a.attrs.items():
        np.testing.assert_array_equal(value, b.attrs[key], err_msg=key)


def test_solution_to_xarray_round_trips_through_netcdf(fourbar_run, tmp_path):
    mech, sol = fourbar_run
    ds = sol.to_xarray(mech, options={"rtol": 1e-8, "stabilization": "projection"})
    assert list(ds.coordinate.values) == list(mech.coordinate_names)
    assert ds.q.dims == ("time", "coordinate") and ds.q.shape == (11, mech.n)
    labels = [f"{name}:{k}" for name, rows in mech.constraint_groups for k in range(len(rows))]
    assert list(ds.constraint.values) == labels
    assert list(ds.constraint_group.values) == [label.split(":")[0] for label in labels]
    np.testing.assert_array_equal(ds.multipliers.values, np.asarray(sol.multipliers))
    np.testing.assert_array_equal(ds.qdd.values, np.asarray(sol.qdd))
    reactions = jaxmbs.solution_reactions(mech, sol)
    for joint in ("A", "B", "C", "D"):
        np.testing.assert_array_equal(
            ds[f"reaction.{joint}.force"].values, np.asarray(reactions.joints[joint]["force"])
        )
    assert ds.attrs["method"] == sol.method == "banded"  # the default: auto, its choice
    assert ds.attrs["option_stabilization"] == "projection"
    assert int(ds.result) == 0 and ds.result.attrs["flag_meanings"].split()[0] == "successful"
    assert "energy" in ds and int(ds["stats.num_steps"]) > 0
    assert int(ds.energy_conserved) == 1  # the four-bar is conservative
    path = tmp_path / "fourbar.nc"
    ds.to_netcdf(path)
    assert_same_dataset(ds, xr.load_dataset(path))


def test_element_forces_are_exported(tmp_path):
    mech = spring_pendulum.spring_pendulum(k=200.0, c=2.0)  # soft: not stiff
    q0, qd0 = spring_pendulum.initial_state(mech)
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, 0.2), saveat=np.linspace(0.0, 0.2, 5))
    ds = jaxmbs.to_xarray(mech, sol)
    forces = jaxmbs.element_forces(mech, sol)
    assert forces
    assert int(ds.energy_conserved) == 0  # the damper dissipates
    for name, value in forces.items():
        np.testing.assert_array_equal(ds[f"element_force.{name}"].values, np.asarray(value))
    ds.to_netcdf(tmp_path / "spring.nc")
    assert_same_dataset(ds, xr.load_dataset(tmp_path / "spring.nc"))


def test_monte_carlo_to_xarray_has_a_sample_dimension(tmp_path):
    mech = fourbar.fourbar()
    q0, qd0 = fourbar.initial_state(mech)
    masses = np.array([1.5, 2.0, 2.5])
    out = jaxmbs.monte_carlo(
        mech, {"params": {"m2": masses}}, (0.0, 0.5), q0=q0, qd0=qd0, saveat=TS[:6]
    )
    ds = out.to_xarray(mech)
    assert ds.q.dims == ("sample", "time", "coordinate") and ds.q.shape == (3, 6, mech.n)
    np.testing.assert_array_equal(ds["input.params.m2"].values, masses)
    np.testing.assert_array_equal(ds.result.values, out.result)
    np.testing.assert_array_equal(ds.q.values, np.asarray(out.solutions.q))
    one = jaxmbs.to_xarray(
        mech,
        jaxmbs.simulate(
            mech, q0, qd0, (0.0, 0.5), saveat=TS[:6], params={**mech.params, "m2": 2.5}
        ),
    )
    # the reactions use each sample's parameters: sample 2 is the run with m2 = 2.5
    np.testing.assert_allclose(
        ds["reaction.B.force"].values[2], one["reaction.B.force"].values, rtol=1e-6, atol=1e-9
    )
    ds.to_netcdf(tmp_path / "study.nc")
    assert_same_dataset(ds, xr.load_dataset(tmp_path / "study.nc"))


def test_animate_writes_one_changing_frame_per_output_time(fourbar_run, tmp_path):
    mech, sol = fourbar_run
    path = jaxmbs.animate(mech, sol, tmp_path / "fourbar.gif")
    with Image.open(path) as gif:
        assert gif.n_frames == len(TS)
        frames = []
        for k in range(gif.n_frames):
            gif.seek(k)
            frame = np.asarray(gif.convert("RGB"), dtype=np.int16)
            frames.append(frame[frame.shape[0] // 8 :])  # below the title (it shows t)
    for a, b in zip(frames, frames[1:], strict=False):
        assert np.count_nonzero(np.any(a != b, axis=-1)) > 100


def test_animate_rejects_bad_paths_before_any_work(fourbar_run, tmp_path):
    mech, sol = fourbar_run
    with pytest.raises(ValueError, match="gif"):
        jaxmbs.animate(mech, sol, tmp_path / "fourbar.avi")
    with pytest.raises(ValueError, match="not a folder"):
        jaxmbs.animate(mech, sol, tmp_path / "missing" / "fourbar.gif")
    if shutil.which("ffmpeg") is None:
        with pytest.raises(RuntimeError, match="ffmpeg"):
            jaxmbs.animate(mech, sol, tmp_path / "fourbar.mp4")
    assert not list(tmp_path.iterdir())


def test_snapshot_draws_one_line_per_body(fourbar_run):
    import matplotlib.pyplot as plt

    mech, sol = fourbar_run
    fig = jaxmbs.snapshot(mech, sol, [0.0, 0.5, 1.0])
    try:
        assert len(fig.axes) == 3
        for ax in fig.axes:
            assert [line.get_label() for line in ax.lines] == ["crank", "coupler", "rocker"]
        # the crank's line runs from the ground pivot O2 = (0, 0) to B, l1 = 0.2 m away
        x, y = (np.asarray(v, dtype=float) for v in fig.axes[1].lines[0].get_data())
        ends = np.hypot(x, y)
        assert x.shape == (2,) and np.min(ends) < 1e-9 and abs(np.max(ends) - 0.2) < 1e-9
        with pytest.raises(ValueError, match="must lie in"):
            jaxmbs.snapshot(mech, sol, [2.0])
    finally:
        plt.close(fig)


def test_spatial_snapshot_draws_the_builder_s_joints_in_3d():
    """A spatial double pendulum hanging from O = 0, its joints kept by the builder
    (nothing passed): the upper rod is drawn between its joint points O and P, the lower one
    (a single joint point) from P to its centre of mass, in 3-D."""
    bodies = [spatial.Body(name, 1.0, (0.1, 0.1, 0.01)) for name in ("upper", "lower")]
    joints = [
        spatial.Spherical("O", 0, (0.0, 0.0, 0.5)),
        spatial.Spherical("P", 0, (0.0, 0.0, -0.5), 1, (0.0, 0.0, 0.5)),
    ]
    q0 = np.concatenate([spatial.pose((0.0, 0.0, -z), np.eye(3)) for z in (0.5, 1.5)])
    mech = spatial.spatial_mechanism(bodies, joints, reference_q=q0)
    sol = jaxmbs.simulate(mech, q0, np.zeros_like(q0), (0.0, 0.1), saveat=np.array([0.0, 0.1]))
    assert mech.joints == tuple(joints)
    fig = jaxmbs.snapshot(mech, sol, [0.0])
    try:
        (ax,) = fig.axes
        assert ax.name == "3d" and [line.get_label() for line in ax.lines] == ["upper", "lower"]
        for line, ends in zip(ax.lines, ([-1.0, 0.0], [-1.5, -1.0]), strict=True):
            x, y, z = (np.asarray(v, dtype=float) for v in line.get_data_3d())
            np.testing.assert_allclose(np.sort(z), ends, atol=1e-9)
            np.testing.assert_allclose(np.concatenate([x, y]), 0.0, atol=1e-9)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_cli_writes_netcdf_csv_and_gif(tmp_path, capsys):
    nc, table, gif = tmp_path / "fb.nc", tmp_path / "fb.csv", tmp_path / "fb.gif"
    base = ["simulate", "fourbar", "--t1", "1.0", "--points", "11"]
    assert cli.main([*base, "--out", str(nc), "--animate", str(gif)]) == 0
    assert cli.main([*base, "--out", str(table)]) == 0
    ds = xr.load_dataset(nc)
    assert list(ds.coordinate.values)[:3] == ["crank.x", "crank.y", "crank.phi"]
    assert abs(ds.attrs["option_rtol"] - 1e-8) < 1e-20 and ds.time.size == 11
    with Image.open(gif) as image:
        assert image.n_frames == 11
    with open(table) as f:
        rows = list(csv.reader(f))
    header = rows[0]
    assert header[:2] == ["t", "q[crank.x]"] and "qd[rocker.phi]" in header
    assert "qdd[coupler.phi]" in header and "lambda[D:1]" in header
    assert "max_abs_position_residual" in header and "max_abs_velocity_residual" in header
    assert len(header) == len(set(header)) == 1 + 3 * 9 + 8 + 3 and len(rows) == 12
    np.testing.assert_array_equal(
        [float(v) for v in rows[1][header.index("lambda[A:0]") :][:8]],
        ds.multipliers.values[0],
    )
    assert "energy drift" in capsys.readouterr().out


def test_cli_rejects_unknown_suffixes_before_the_run(tmp_path, capsys):
    base = ["simulate", "fourbar", "--t1", "1.0"]
    for flag, name in (("--out", "fb.txt"), ("--animate", "fb.png")):
        with pytest.raises(SystemExit) as exit_info:
            cli.main([*base, flag, str(tmp_path / name)])
        assert exit_info.value.code == 2
        assert "model" not in capsys.readouterr().out  # nothing was simulated


def test_cli_labels_energy_change_of_a_driven_mechanism(capsys):
    assert cli.main(["simulate", "slider-crank-driven", "--t1", "0.5", "--points", "11"]) == 0
    text = capsys.readouterr().out
    assert "energy change" in text and "not conservative" in text and "energy drift" not in text


def test_float32_run_of_a_conservative_mechanism_reports_drift(capsys):
    """In float32 the physical energy rate is round-off (~1e-6 of the power exchanged), far
    below the float32 threshold 10 √ε, so a conservative run still reports a drift."""
    argv = ["simulate", "fourbar", "--t1", "1.0", "--points", "11", "--float32"]
    assert cli.main([*argv, "--rtol", "1e-5", "--atol", "1e-5"]) == 0
    assert "energy drift" in capsys.readouterr().out


def test_help_shows_tolerance_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.main(["simulate", "--help"])
    text = capsys.readouterr().out
    assert "relative tolerance (default 1e-8)" in text
    assert "absolute tolerance (default 1e-8)" in text
