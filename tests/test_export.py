"""Results people can look at, keep and share: labelled datasets (netCDF), named CSV
columns, animations and snapshots, from the library and the command line."""

import csv
import shutil

import numpy as np
import pytest

import jaxmbs
from jaxmbs import cli
from jaxmbs.model.joints import spatial
from jaxmbs.models import chain, fourbar, spring_pendulum

xr = pytest.importorskip("xarray")
pytest.importorskip("h5netcdf")
pytest.importorskip("matplotlib")
Image = pytest.importorskip("PIL.Image")

TS = np.linspace(0.0, 1.0, 11)
G = 9.81
#: The four-bar's links (crank, coupler, rocker), written out rather than read from the model:
#: masses (kg) and lengths (m); each a uniform rod, J = m l²/12, centre at mid-length.
MASSES = np.array([1.0, 2.0, 1.5])
LENGTHS = np.array([0.2, 0.5, 0.4])


@pytest.fixture(scope="module")
def fourbar_run():
    mech = fourbar.fourbar()
    q0, qd0 = fourbar.initial_state(mech)
    return mech, jaxmbs.simulate(mech, q0, qd0, (0.0, 1.0), saveat=TS)


def link_ends(q):
    """(T, 3, 2, 2): both ends of each four-bar link, centre ∓ l/2 (cos φ, sin φ), from q."""
    q = np.asarray(q).reshape(-1, 3, 3)
    half = LENGTHS[None, :, None] / 2 * np.stack([np.cos(q[..., 2]), np.sin(q[..., 2])], -1)
    return np.stack([q[..., :2] - half, q[..., :2] + half], axis=2)


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
    ds = jaxmbs.to_xarray(mech, sol, options={"rtol": 1e-8, "stabilization": "projection"})
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


def test_solution_to_xarray_values_against_hand_computations(fourbar_run):
    """The exported energy, its rate and the generalized reactions against the same
    quantities computed here from q, q̇, q̈ of the dataset and the links written out:
    E = Σ ½ m |v_G|² + ½ J φ̇² + m g y_G, f = Q − M q̈ with Q the weights, and dE/dt = 0
    (conservative) to round-off of the power exchanged, Σ m v_G·a_G + J φ̇ φ̈."""
    mech, sol = fourbar_run
    ds = jaxmbs.to_xarray(mech, sol)
    q, qd, qdd = (ds[name].values.reshape(-1, 3, 3) for name in ("q", "qd", "qdd"))
    J = MASSES * LENGTHS**2 / 12
    kinetic = 0.5 * (MASSES * np.sum(qd[..., :2] ** 2, -1) + J * qd[..., 2] ** 2).sum(-1)
    energy = kinetic + (MASSES * G * q[..., 1]).sum(-1)
    np.testing.assert_allclose(ds.energy.values, energy, rtol=0, atol=1e-13 * np.max(kinetic))
    assert np.ptp(kinetic) > 0.1  # energy is exchanged between kinetic and potential
    inertia = np.stack([MASSES, MASSES, J], -1)
    weights = np.stack([0 * MASSES, -MASSES * G, 0 * MASSES], -1)
    reaction = (weights - inertia * qdd).reshape(len(TS), -1)
    scale = np.max(np.abs(reaction))
    np.testing.assert_allclose(ds.generalized_reaction.values, reaction, atol=1e-12 * scale)
    power = np.sum(inertia * qd * qdd, axis=(-1, -2))  # dT/dt, which gravity's power cancels
    assert np.max(np.abs(power)) > 1.0
    assert np.max(np.abs(ds.energy_rate.values)) < 1e-12 * np.max(np.abs(power))


def test_pendulum_pin_reaction_against_the_analytic_one(tmp_path):
    """A uniform rod (m, L) pinned at one end, released from rest at θ₀ from the downward
    vertical: the exported pin force on the rod has, along the rod towards the pin, the
    tension T = m (g cos θ + ρ ω²) (ρ = L/2: the centre's v²/ρ), and across it (towards
    increasing θ) m g sin θ J/(J + mρ²) = ¼ m g sin θ, with θ and ω read from the dataset's
    q and q̇; at t = 0 (ω = 0) the tension is m g cos θ₀."""
    m, length, theta0 = 1.5, 0.8, 1.0
    mech = chain.chain(1, length=length, mass=m, g=G)
    q0, qd0 = chain.initial_state(mech, theta0)
    ts = np.linspace(0.0, 0.4, 5)
    ds = jaxmbs.to_xarray(mech, jaxmbs.simulate(mech, q0, qd0, (0.0, 0.4), saveat=ts))
    phi, omega = ds.q.values[:, 2], ds.qd.values[:, 2]
    theta, rho = phi + np.pi / 2, length / 2
    along = np.stack([np.cos(phi), np.sin(phi)], -1)  # from the pin to the centre
    across = np.stack([-np.sin(phi), np.cos(phi)], -1)
    force = ds["reaction.J0.force"].values
    tension = m * (G * np.cos(theta) + rho * omega**2)
    np.testing.assert_allclose(-np.sum(force * along, -1), tension, rtol=1e-12)
    np.testing.assert_allclose(
        np.sum(force * across, -1), m * G * np.sin(theta) / 4, rtol=0, atol=1e-12 * m * G
    )
    assert abs(-force[0] @ along[0] - m * G * np.cos(theta0)) < 1e-12 * m * G
    assert np.max(np.abs(omega)) > 2.0 and np.max(theta) - np.min(theta) > 0.5  # it swings


def test_element_forces_are_exported(tmp_path):
    """The spring-damper's force and the energy rate against the spring pendulum's own law,
    from q and q̇ of the dataset: pivot at the origin, bob centre at q[3:5], so the
    spring's length is δ = |r_bob| and its rate δ̇ = r̂ · v_bob; the force is k (δ − l) + c δ̇
    and the only power that changes the energy is the damper's, dE/dt = −c δ̇²."""
    k, c, free_length = 200.0, 2.0, 1.0
    mech = spring_pendulum.spring_pendulum(k=k, c=c)  # soft: not stiff
    q0, qd0 = spring_pendulum.initial_state(mech)
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, 0.2), saveat=np.linspace(0.0, 0.2, 5))
    ds = jaxmbs.to_xarray(mech, sol)
    forces = jaxmbs.element_forces(mech, sol)
    assert forces
    assert int(ds.energy_conserved) == 0  # the damper dissipates
    r, v = ds.q.values[:, 3:5], ds.qd.values[:, 3:5]
    length = np.linalg.norm(r, axis=1)
    rate = np.sum(r * v, axis=1) / length
    law = k * (length - free_length) + c * rate
    np.testing.assert_allclose(
        ds["element_force.spring"].values, law, rtol=0, atol=1e-12 * np.max(np.abs(law))
    )
    damper_power = c * rate**2
    assert np.max(damper_power) > 0.1  # the damper works
    np.testing.assert_allclose(
        ds.energy_rate.values, -damper_power, rtol=0, atol=1e-12 * np.max(damper_power)
    )
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
    ds = jaxmbs.monte_carlo_to_xarray(mech, out)
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


def test_animate_draws_each_link_where_it_is(fourbar_run, tmp_path, monkeypatch):
    """In a frame of the GIF, each link's line runs between its two joints as computed here
    from q (`link_ends`), and the pixel at the centre of each link, projected by the
    animation's own axes, has the colour of that link's line (the figure and its frame
    function are taken from the `FuncAnimation` that `animate` makes)."""
    from matplotlib.animation import FuncAnimation
    from matplotlib.colors import to_rgb

    made = []
    original = FuncAnimation.__init__

    def keep(self, fig, func, *args, **kwargs):
        made.append((fig, func))
        original(self, fig, func, *args, **kwargs)

    monkeypatch.setattr(FuncAnimation, "__init__", keep)
    mech, sol = fourbar_run
    path = jaxmbs.animate(mech, sol, tmp_path / "fourbar.gif")
    ((fig, frame),) = made
    k = 7
    frame(k)  # the artists as they were drawn into frame k
    ax = fig.axes[0]
    ends = link_ends(sol.q)[k]
    with Image.open(path) as gif:
        gif.seek(k)
        image = np.asarray(gif.convert("RGB"), dtype=float)
    assert image.shape[:2] == (round(fig.bbox.height), round(fig.bbox.width))
    for line, name, link in zip(ax.lines, ("crank", "coupler", "rocker"), ends, strict=True):
        assert line.get_label() == name
        drawn = np.stack([np.asarray(v, dtype=float) for v in line.get_data()], -1)
        assert drawn.shape == (2, 2)
        # the two ends, in either order
        error = min(np.max(np.abs(drawn - link)), np.max(np.abs(drawn[::-1] - link)))
        assert error < 1e-12, (name, drawn, link)
        x, y = ax.transData.transform(link.mean(axis=0))
        pixel = image[round(image.shape[0] - y), round(x)]
        colour = 255 * np.asarray(to_rgb(line.get_color()))
        assert np.max(np.abs(pixel - colour)) < 40, (name, pixel, colour)


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
        # every link of each panel between its joints at that time, computed from q
        for ax, k in zip(fig.axes, (0, 5, 10), strict=True):
            for line, link in zip(ax.lines, link_ends(sol.q)[k], strict=True):
                drawn = np.stack([np.asarray(v, dtype=float) for v in line.get_data()], -1)
                error = min(np.max(np.abs(drawn - link)), np.max(np.abs(drawn[::-1] - link)))
                assert error < 1e-12, (k, line.get_label(), drawn, link)
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
