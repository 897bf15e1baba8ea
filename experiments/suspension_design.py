"""Suspension design with the McPherson quarter car (issue 26): tune the coil spring, the
damper and the lower ball joint's height by gradient, check against a grid search, then the
camber and toe curves of the tuned design under ±1 mm hard-point tolerances.

The quarter car (`jaxmbs.models.mcpherson.quarter_car`) drives at 12 m/s for 1.5 s over a
road with a 4 cm cosine bump (0.6 m long, at x = 3 m) and a seeded random section (x ≥ 8 m,
smoothed Gaussian heights, 6 mm standard deviation), starting at rest at its static point
(`jaxmbs.equilibrium`, differentiable by the implicit function theorem). The objective is
the comfort/road-holding compromise

    J = RMS(z̈_s) + w · std(F_t) / W,

the RMS sprung-mass acceleration (m/s²) plus the tyre-load variation relative to the static
load W, with w = `WEIGHT`, over `TS`. The design variables x = (k/k₀, c/c₀, Δz_B/1 cm):
spring rate, damping coefficient and the lower ball joint B's height (the arm's outboard
hard point). Steps:

1. the gradient of J through the equilibrium and `simulate` by reverse mode (`jax.grad`),
   against central differences at the same tolerance, and against forward mode;
2. L-BFGS-B (scipy, bounded) from the initial design on the compiled value and reverse-mode
   gradient (`jaxmbs.optimize` would compile its own copy of the gradient);
3. a grid search over (k, c) with z_B at its optimum;
4. hard-point tolerances: `N_SAMPLES` designs with every hard point moved by a uniform
   ±1 mm in each coordinate; camber and toe over ±`TRAVEL` of wheel travel
   (`travel_configuration`, the chassis held; a batch of kinematic assemblies in one jitted
   `lax.map`), percentiles per travel.

Writes experiments/results/suspension_design.{png,json}.

    python experiments/suspension_design.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.optimize  # noqa: E402

import jaxmbs  # noqa: E402
from jaxmbs.model.joints import spatial  # noqa: E402
from jaxmbs.models import mcpherson  # noqa: E402

RESULTS = Path(__file__).parent / "results"
SEED = 20261126
DURATION = 1.5  # s
TS = np.linspace(0.0, DURATION, 301)
WEIGHT = 10.0  # w: tyre-load variation against comfort
SCALE = np.array([30e3, 2000.0, 0.01])  # k₀ (N/m), c₀ (N s/m), 1 cm
X0 = np.array([1.5, 0.4, 0.0])  # a stiff, under-damped start: 45 kN/m, 800 N s/m
TOL = 1e-10
#: Central differences' step in the scaled design variables. Measured on the full road at
#: tolerance 1e-12, against the reverse gradient: h = 2e-2: 2.7e-5 relative, 1e-2: 1.4e-6,
#: 5e-3: 8.2e-8, 2.5e-3: 6.6e-8 (the 5-point stencil's h⁴ truncation, then the solver's noise).
FD_STEP = 5e-3
TRAVEL = 0.06  # m, either way
N_SAMPLES = 200
TOLERANCE = 1e-3  # m, uniform, every hard-point coordinate


def study_road(seed: int = SEED) -> jaxmbs.Profile:
    """z_road(x) at 5 cm spacing over 0–20 m: flat, the bump at 3 m, the random section."""
    x = np.arange(0.0, 20.0, 0.05)
    bump = np.where((x >= 3.0) & (x <= 3.6), 0.02 * (1 - np.cos(2 * np.pi * (x - 3.0) / 0.6)), 0.0)
    noise = np.random.default_rng(seed).normal(size=x.size)
    rough = np.convolve(noise, np.ones(6) / 6, mode="same")  # a 30 cm moving average
    rough *= 0.006 / rough.std() * np.clip((x - 8.0) / 0.5, 0.0, 1.0)
    return jaxmbs.Profile(x, bump + rough)


def design_params(mechanism: jaxmbs.Mechanism, x) -> dict:
    """The parameters of design x (k, c scaled by k₀, c₀; z_B moved by x₃ cm)."""
    p = mechanism.params
    B = p["hardpoints"]["B"] + jnp.array([0.0, 0.0, 1.0]) * x[2] * SCALE[2]
    hardpoints = {**p["hardpoints"], "B": B}
    return {**p, "k_spring": x[0] * SCALE[0], "c_damper": x[1] * SCALE[1], "hardpoints": hardpoints}


def objective(
    mechanism: jaxmbs.Mechanism, road: jaxmbs.Profile, x, ts=TS, tol: float = TOL, **options
):
    """J(x) (module docstring): equilibrium, simulation from rest (no stabilisation: the
    drift stays at the tolerance over 1.5 s), then the two terms. `options` go to
    `simulate` (e.g. `method=`)."""
    p = design_params(mechanism, x)
    q0 = mcpherson.static_configuration(mechanism, p)
    sol = jaxmbs.simulate(
        mechanism,
        q0,
        jnp.zeros_like(q0),
        (ts[0], ts[-1]),
        saveat=ts,
        params=p,
        rtol=tol,
        atol=tol,
        stabilization="none",
        **options,
    )
    heave = spatial.Layout.from_mechanism(mechanism).coordinates(mcpherson.CHASSIS).start + 2
    orientation = spatial.Layout.from_mechanism(mechanism).orientations[mcpherson.CHASSIS]
    load = jax.vmap(lambda t, q, qd: mcpherson.tyre_load(road, orientation, t, q, qd, p))
    tyre = load(sol.ts, sol.q, sol.qd)
    weight = p["g"] * sum(p[f"m{i}"] for i in range(1, 6))
    return jnp.sqrt(jnp.mean(sol.qdd[:, heave] ** 2)) + WEIGHT * jnp.std(tyre) / weight


def central_difference(f, x, h: float = 1e-2) -> np.ndarray:
    """∂f/∂xᵢ by the 5-point stencil (truncation O(h⁴)). Run f at a tolerance well below the
    gradient's (1e-12): the differences divide the solver's noise in f by h."""
    weights = np.array([1.0, -8.0, 8.0, -1.0]) / (12 * h)
    gradient = np.zeros(x.size)
    for i in range(x.size):
        e = np.eye(x.size)[i] * h
        gradient[i] = sum(
            w * float(f(x + s * e)) for w, s in zip(weights, (-2, -1, 1, 2), strict=True)
        )
    return gradient


def tolerance_samples(mechanism: jaxmbs.Mechanism, x, n: int = N_SAMPLES, seed: int = SEED):
    """n parameter sets of design x with every hard-point coordinate moved by U(±1 mm), and
    their design configurations (consistent for any hard points)."""
    rng = np.random.default_rng(seed)
    base = design_params(mechanism, jnp.asarray(x))
    nominal = {k: np.asarray(v) for k, v in base["hardpoints"].items()}
    samples = [
        {k: v + rng.uniform(-TOLERANCE, TOLERANCE, 3) for k, v in nominal.items()} for _ in range(n)
    ]
    hardpoints = {k: jnp.stack([s[k] for s in samples]) for k in nominal}
    q = np.stack(
        [
            mcpherson.design_configuration({"hardpoints": s}, "zxz", mcpherson.QUARTER_CAR_BODIES)
            for s in samples
        ]
    )
    return base, hardpoints, jnp.asarray(q)


def kinematic_curves(mechanism: jaxmbs.Mechanism, base: dict, hardpoints, q, travels):
    """Camber and toe change (rad) over the wheel travels from the assembled design height,
    and the largest constraint residual, per sample (`lax.map`: one sample after another).
    The perturbed design position is not assembled (J off the strut axis CD, for one), so the
    reference is the configuration at zero travel, assembled like the others."""

    def one(sample):
        hp, q0 = sample
        p = {**base, "hardpoints": hp}
        camber0, toe0 = mcpherson.camber_toe(
            mechanism, mcpherson.travel_configuration(mechanism, q0, 0.0, p, steps=12), p
        )

        def at(dz):
            q_ = mcpherson.travel_configuration(mechanism, q0, dz, p, steps=12)
            camber, toe = mcpherson.camber_toe(mechanism, q_, p)
            residual = jnp.max(jnp.abs(jaxmbs.position_residual(mechanism, q_, 0.0, p)))
            return camber - camber0, toe - toe0, residual

        return jax.lax.map(at, travels)

    return jax.jit(lambda hp, q: jax.lax.map(one, (hp, q)))(hardpoints, q)


def optimise(value_and_grad, x0) -> tuple[np.ndarray, list[float]]:
    """L-BFGS-B (scipy) on the compiled value and gradient; the bounds keep the rates
    positive. Returns the optimum and the objective at every evaluation."""
    history = []

    def fun(x):
        value, gradient = value_and_grad(jnp.asarray(x))
        history.append(float(value))
        return float(value), np.asarray(gradient)

    bounds = [(0.2, 3.0), (0.2, 3.0), (-3.0, 3.0)]
    result = scipy.optimize.minimize(
        fun, x0, jac=True, method="L-BFGS-B", bounds=bounds, options={"maxiter": 15}
    )
    return result.x, history


def plot(grid, k_grid, c_grid, x_opt, path, travels, camber, toe, file):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    ax = axes[0]
    contour = ax.contourf(k_grid * SCALE[0] / 1e3, c_grid * SCALE[1] / 1e3, grid.T, 20)
    fig.colorbar(contour, ax=ax, label="J")
    ax.plot(path[:, 0] * SCALE[0] / 1e3, path[:, 1] * SCALE[1] / 1e3, "w.-", label="L-BFGS-B")
    ax.plot(x_opt[0] * SCALE[0] / 1e3, x_opt[1] * SCALE[1] / 1e3, "r*", ms=12, label="optimum")
    ax.set(xlabel="spring rate k (kN/m)", ylabel="damping c (kN s/m)", title="objective J")
    ax.legend()
    for ax, angle, name in ((axes[1], camber, "camber"), (axes[2], toe, "toe-in")):
        mm, deg = travels * 1e3, np.degrees(angle)
        ax.fill_between(mm, *np.percentile(deg, [0, 100], axis=0), alpha=0.2, label="min–max")
        ax.fill_between(mm, *np.percentile(deg, [5, 95], axis=0), alpha=0.4, label="5–95 %")
        ax.plot(mm, np.median(deg, axis=0), "k", label="median")
        ax.set(xlabel="wheel travel (mm, bump +)", ylabel=f"{name} change (deg)")
        ax.set_title(f"{name} change, ±1 mm hard points ({angle.shape[0]} samples)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(file, dpi=120)


def main():
    RESULTS.mkdir(exist_ok=True)
    seconds = {}
    start = time.perf_counter()

    def lap(name):
        nonlocal start
        now = time.perf_counter()
        seconds[name] = round(now - start, 2)
        start = now

    road = study_road()
    mech = mcpherson.quarter_car(road)
    lap("build")
    # The tolerance is an argument (traced): the check at 1e-12 reuses the compiled programs.
    loss_at = jax.jit(lambda x, tol: objective(mech, road, x, tol=tol))
    reverse = jax.jit(jax.value_and_grad(lambda x, tol: objective(mech, road, x, tol=tol)))
    forward = jax.jit(jax.jacfwd(lambda x, tol: objective(mech, road, x, tol=tol)))

    def loss(x):
        return loss_at(x, TOL)

    def value_and_grad(x):
        return reverse(x, TOL)

    x0 = jnp.asarray(X0)
    J0 = float(loss(x0))
    lap("objective: compile and first run")
    float(loss(x0))
    lap("objective: one run")
    _, g0 = value_and_grad(x0)
    lap("gradient: compile and first run (reverse mode)")
    _, g0 = value_and_grad(x0)
    lap("gradient: one run (reverse mode)")
    g_forward = np.asarray(forward(x0, TOL))
    lap("gradient: compile and first run (forward mode)")
    g0 = np.asarray(g0)
    modes_differ = float(np.linalg.norm(g0 - g_forward) / np.linalg.norm(g_forward))
    fd = central_difference(lambda x: loss_at(x, 1e-12), X0, FD_STEP)
    g_fine = np.asarray(reverse(x0, 1e-12)[1])
    lap("central differences (12 runs) and reverse gradient at tolerance 1e-12")
    gradient_error = float(np.linalg.norm(g_fine - fd) / np.linalg.norm(fd))
    print(
        f"J(x0) = {J0:.6f}; reverse gradient {g0}, forward {g_forward} (differ by "
        f"{modes_differ:.1e}); at tolerance 1e-12: reverse {g_fine}, central differences "
        f"{fd}, error {gradient_error:.2e}"
    )

    x_opt, history = optimise(value_and_grad, X0)
    J_opt = float(loss(jnp.asarray(x_opt)))
    lap("L-BFGS-B")
    print(f"optimum x = {x_opt}, J = {J_opt:.6f} ({len(history)} evaluations)")

    k_grid, c_grid = np.linspace(0.4, 1.6, 7), np.linspace(0.4, 1.6, 7)
    grid = np.array([[float(loss(jnp.array([k, c, x_opt[2]]))) for c in c_grid] for k in k_grid])
    lap("grid search (49 runs)")
    i, j = np.unravel_index(np.argmin(grid), grid.shape)
    print(f"grid optimum k = {k_grid[i]}, c = {c_grid[j]}, J = {grid[i, j]:.6f}")

    travels = jnp.linspace(-TRAVEL, TRAVEL, 13)
    base, hardpoints, q = tolerance_samples(mech, x_opt)
    camber, toe, residual = (
        np.asarray(a) for a in kinematic_curves(mech, base, hardpoints, q, travels)
    )
    lap(f"tolerances ({N_SAMPLES} samples × {travels.size} travels)")
    percentiles = {
        name: {
            f"{round(t * 1e3):+d} mm": np.percentile(np.degrees(a[:, k]), [5, 50, 95])
            .round(4)
            .tolist()
            for k, t in enumerate(np.asarray(travels))
        }
        for name, a in (("camber_deg", camber), ("toe_in_deg", toe))
    }
    summary = {
        "objective_initial": J0,
        "objective_optimum": J_opt,
        "improvement_factor": J0 / J_opt,
        "x0": X0.tolist(),
        "x_optimum": x_opt.tolist(),
        "k_optimum_N_per_m": float(x_opt[0] * SCALE[0]),
        "c_optimum_N_s_per_m": float(x_opt[1] * SCALE[1]),
        "dz_B_optimum_mm": float(x_opt[2] * SCALE[2] * 1e3),
        "optimiser_evaluations": len(history),
        "gradient_reverse": g0.tolist(),
        "gradient_forward": g_forward.tolist(),
        "gradient_modes_relative_difference": modes_differ,
        "gradient_reverse_tolerance_1e-12": g_fine.tolist(),
        "gradient_central_difference_tolerance_1e-12": fd.tolist(),
        "gradient_relative_error": gradient_error,
        "grid_optimum": [float(k_grid[i]), float(c_grid[j])],
        "grid_objective": float(grid[i, j]),
        "grid_step": float(k_grid[1] - k_grid[0]),
        "tolerance_max_residual": float(residual.max()),
        "percentiles_5_50_95": percentiles,
        "seconds": seconds,
    }
    (RESULTS / "suspension_design.json").write_text(json.dumps(summary, indent=2))
    path = np.array([X0, x_opt])
    plot(
        grid,
        k_grid,
        c_grid,
        x_opt,
        path,
        np.asarray(travels),
        camber,
        toe,
        RESULTS / "suspension_design.png",
    )
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
