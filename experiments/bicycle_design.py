"""A design study of the benchmark bicycle (`models/bicycle.py`; Meijaard, Papadopoulos, Ruina
and Schwab, Proc. R. Soc. A 463, 2007, MPRS below): the lean/steer eigenvalues' gradients with
respect to the trail c, the steer-axis tilt λ (head angle π/2 − λ) and the front frame's mass
m_H, the self-stable speed range [v_w, v_c] as a differentiable function of them, and a
gradient-based search for the (c, λ, m_H) that move that range to a target window.

**Eigenvalue gradients.** The four lean/steer eigenvalues s_k(p, v) are those of the state
matrix A(p, v) of `jaxmbs.linearize` about upright straight running at speed v (x, y, yaw and
the wheel angles cyclic). One compiled program returns them and their Jacobian with respect
to x = (c, λ, m_H, v) by forward mode (`jax.jacfwd`): through `linearize` (its Newton solves
by the implicit function theorem) to ∂A/∂x, and through the eigendecomposition, where for a
simple eigenvalue with right and left eigenvectors A r = s r, lᴴ A = s lᴴ,

    ∂s/∂x = lᴴ (∂A/∂x) r / (lᴴ r).

Checked against central differences of the same program's eigenvalues, [s(x + h eᵢ) −
s(x − h eᵢ)] / 2h (error O(h²) + O(ε/h); the eigenvalues sorted by (Im, Re), a consistent
order at speeds where none collide), and against central differences of MPRS's linear model
M q̈ + v C₁ q̇ + (g K₀ + v² K₂) q = 0 (`bicycle.linear_model`, their Appendix A formulas,
an independent derivation), with a Richardson step (4 D(h) − D(2h)) / 3, error O(h⁴).

**The self-stable range.** The weave speed v_w is where the oscillating pair's real part
crosses zero, the capsize speed v_c where the largest real eigenvalue does: roots of
g(v, p) = Re s(v, p), found by Newton on v with ∂g/∂v from the same Jacobian, and
differentiated by the implicit function theorem,

    dv*/dp = −(∂g/∂p) / (∂g/∂v)   at g(v*, p) = 0,

checked against central differences of the Newton roots.

**The search.** In relative units u = p / p₀ (p₀ the benchmark's), the residual
r(u) = (v_w − v_w⁎, v_c − v_c⁎) has the 2 × 3 Jacobian J = ∂(v_w, v_c)/∂u above.
Levenberg-Marquardt takes du minimising |J du + r|² + μ |du|² — as μ → 0 the minimum-norm
Gauss-Newton step −J⁺ r: of all designs that meet the window to first order, the nearest —
within the bounds (a coordinate at a bound that the step would push out is held there),
and adapts μ: a step that decreases |r| is taken and μ divided by 3, else μ is multiplied by
4. Two targets and three parameters: a window is reached where the map p ↦ (v_w, v_c)
covers it inside the bounds; elsewhere the steps stall at a local minimum of |r| (in
practice at a fold of the map, where J loses rank). The design reached is verified by a
fresh scan of max Re s(v) over 0 ≤ v ≤ 10 m/s (Brent's method at its sign changes),
independent of the mode labels and of Newton. `--linear` runs the same search on the
published linear model (derivatives by Richardson differences), which needs no compilation.

    python experiments/bicycle_design.py                # ~5 min on 2 cores, mostly compilation
    python experiments/bicycle_design.py --linear       # the linear model: seconds
    python experiments/bicycle_design.py --window 3 3.5 --window 3.5 4.5 --figure results/loci.png
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from scipy.optimize import brentq  # noqa: E402

from jaxmbs.models import bicycle  # noqa: E402

#: The design parameters, in the order of x = (c, λ, m_H, v).
DESIGN = ("c", "lam", "mH")
#: Bounds of the search: trail 2–15 cm, head angle 64–78° (λ 12–26°), front frame 1–10 kg.
BOUNDS = np.array([[0.02, 0.15], np.deg2rad([12.0, 26.0]), [1.0, 10.0]])
#: The Levenberg-Marquardt damping μ of the first step (u = p / p₀, speeds in m/s).
DAMPING = 0.1
#: Speeds (m/s) of the gradient check: no two eigenvalues collide at them.
CHECK_SPEEDS = (2.0, 4.5, 6.0, 8.0)
#: Central-difference steps relative to each coordinate of x (the 3-D model; the linear
#: model's Richardson differences use `LINEAR_STEP`).
STEP = 1e-5
LINEAR_STEP = 1e-3
#: Levenberg-Marquardt steps at most.
MAX_STEPS = 60
#: The search's tolerance on |r| = |(v_w, v_c) − target| (m/s).
TOL = 1e-9
#: A Levenberg-Marquardt step that decreases |r| by less (m/s) ends the search.
STALL = 1e-7
SCAN = np.linspace(0.0, 10.0, 201)
COLORS = ("C0", "C3", "C2", "C1", "C4", "C5")

Eigen = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
Mode = Callable[[np.ndarray, np.ndarray], tuple[float, np.ndarray]]


def order(s: np.ndarray) -> np.ndarray:
    """The indices that sort eigenvalues by (Im, Re): the pair's lower member, the real ones
    ascending, the pair's upper member — unchanged by a small perturbation of simple ones."""
    return np.lexsort((s.real, np.round(s.imag, 12)))


def compile_eigen(mechanism) -> tuple[Eigen, dict[str, float]]:
    """x = (c, λ, m_H, v) ↦ (the four eigenvalues s, ∂s/∂x as a 4 × 4 complex array), sorted
    by `order`: one jitted forward-mode program; the seconds spent tracing and compiling."""

    def parts(x: jax.Array) -> jax.Array:
        params = dict(zip(DESIGN, x[:3], strict=True))
        s = bicycle.lean_steer_eigenvalues(mechanism, x[3], params=params)
        split = jnp.concatenate([s.real, s.imag])
        return split, split

    program = jax.jit(jax.jacfwd(parts, has_aux=True))
    x0 = jnp.array([mechanism.params[k] for k in DESIGN] + [5.0])
    start = time.perf_counter()
    lowered = program.lower(x0)
    traced = time.perf_counter()
    compiled = lowered.compile()
    seconds = {"trace": traced - start, "compile": time.perf_counter() - traced}

    def eigen(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        jacobian, split = (np.asarray(a) for a in compiled(jnp.asarray(x, dtype=float)))
        s = split[:4] + 1j * split[4:]
        ds = jacobian[:4] + 1j * jacobian[4:]
        k = order(s)
        return s[k], ds[k]

    start = time.perf_counter()
    eigen(np.asarray(x0))
    seconds["first_call"] = time.perf_counter() - start
    return eigen, seconds


def linear_eigenvalues(p: np.ndarray, v: float) -> np.ndarray:
    """The eigenvalues of MPRS's linear model (`bicycle.linear_model`) at the design p = (c,
    λ, m_H), sorted by `order`: those of [[0, I], [−M⁻¹(g K₀ + v² K₂), −v M⁻¹ C₁]]."""
    m = bicycle.linear_model(**dict(zip(DESIGN, map(float, p), strict=True)))
    inverse = np.linalg.inv(m["M"])
    g = bicycle.DEFAULTS["g"]
    A = np.block(
        [
            [np.zeros((2, 2)), np.eye(2)],
            [-inverse @ (g * m["K0"] + v**2 * m["K2"]), -v * inverse @ m["C1"]],
        ]
    )
    s = np.linalg.eigvals(A)
    return s[order(s)]


def central_differences(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, h: np.ndarray):
    """Columns [f(x + hᵢ eᵢ) − f(x − hᵢ eᵢ)] / 2hᵢ."""
    return np.stack([(f(x + e) - f(x - e)) / (2 * e[i]) for i, e in enumerate(np.diag(h))], -1)


def linear_eigen(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The linear model's eigenvalues at x = (c, λ, m_H, v) and ∂s/∂x by Richardson's
    (4 D(h) − D(2h)) / 3 of central differences D, hᵢ = `LINEAR_STEP` · max(|xᵢ|, 10⁻²):
    `compile_eigen`'s counterpart for the published model (NumPy, nothing to compile)."""

    def f(y: np.ndarray) -> np.ndarray:
        return linear_eigenvalues(y[:3], y[3])

    h = LINEAR_STEP * np.maximum(np.abs(x), 1e-2)
    differences = [central_differences(f, x, step) for step in (h, 2 * h)]
    return f(x), (4 * differences[0] - differences[1]) / 3


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    """max |a − b| / |a| over the entries (complex moduli)."""
    return float(np.max(np.abs(a - b) / np.abs(a)))


def check_gradients(eigen: Eigen, p0: np.ndarray) -> None:
    """Autodiff ∂s/∂(c, λ, m_H) against central differences of the same program and against
    Richardson differences of the published linear model, at `CHECK_SPEEDS`."""
    print("eigenvalue gradients ∂s/∂(c, λ, m_H): autodiff against central differences")
    for v in CHECK_SPEEDS:
        x = np.append(p0, v)
        s, ds = eigen(x)
        fd = central_differences(lambda y: eigen(y)[0], x, STEP * np.abs(x))
        richardson = linear_eigen(x)[1]
        print(f"  v = {v} m/s, s = {np.array2string(s, precision=4)}")
        for name, i in zip(DESIGN, range(3), strict=True):
            print(
                f"    ∂s/∂{name:3s} = {np.array2string(ds[:, i], precision=5)}; relative error "
                f"vs central differences {relative_error(ds[:, i], fd[:, i]):.1e}, "
                f"vs the linear model {relative_error(ds[:, i], richardson[:, i]):.1e}"
            )
        value_error = float(np.max(np.abs(s - linear_eigenvalues(p0, v))))
        speed_error = relative_error(ds[:, 3], fd[:, 3])
        print(f"    ∂s/∂v relative error {speed_error:.1e}; |s − s_linear| {value_error:.1e}")


def weave(s: np.ndarray, ds: np.ndarray) -> tuple[float, np.ndarray]:
    """Re s and its gradient for the oscillating pair's upper member (the last by `order`)."""
    if s[-1].imag <= 0:
        raise ValueError(f"no oscillating pair among {s}")
    return float(s[-1].real), ds[-1].real


def capsize(s: np.ndarray, ds: np.ndarray) -> tuple[float, np.ndarray]:
    """The largest real eigenvalue and its gradient."""
    real = np.flatnonzero(s.imag == 0)
    k = real[np.argmax(s[real].real)]
    return float(s[k].real), ds[k].real


def crossing(
    eigen: Eigen, mode: Mode, p: np.ndarray, v: float, tol: float = 1e-12
) -> tuple[float, np.ndarray]:
    """The speed v* where `mode`'s real part g crosses zero, by Newton from v, and
    dv*/dp = −(∂g/∂p)/(∂g/∂v) (implicit function theorem). A RuntimeError when an iterate
    leaves the speeds of `SCAN` (no crossing near v: the search then shortens its step)."""
    for _ in range(30):
        g, dg = mode(*eigen(np.append(p, v)))
        step = g / dg[3]
        v -= step
        if not SCAN[0] < v <= SCAN[-1]:
            raise RuntimeError(f"Newton on the crossing speed left {SCAN[0]}–{SCAN[-1]} m/s")
        if abs(step) < tol:
            return v, -dg[:3] / dg[3]
    raise RuntimeError(f"Newton on the crossing speed did not converge (last step {step:.1e})")


def speeds(
    eigen: Eigen, p: np.ndarray, guess: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """(v_w, v_c) and their 2 × 3 Jacobian with respect to p."""
    (vw, dvw), (vc, dvc) = (
        crossing(eigen, weave, p, guess[0]),
        crossing(eigen, capsize, p, guess[1]),
    )
    return np.array([vw, vc]), np.stack([dvw, dvc])


def check_speed_gradients(eigen: Eigen, p0: np.ndarray) -> np.ndarray:
    """dv_w/dp, dv_c/dp by the implicit function theorem against central differences of the
    Newton roots; returns (v_w, v_c) of the benchmark."""
    v, jacobian = speeds(eigen, p0, (4.3, 6.0))
    fd = central_differences(lambda p: speeds(eigen, p, tuple(v))[0], p0, STEP * np.abs(p0))
    print(f"benchmark: v_w = {v[0]:.9f} m/s, v_c = {v[1]:.9f} m/s")
    for label, row, check in zip(("v_w", "v_c"), jacobian, fd, strict=True):
        print(
            f"  d{label}/d(c, λ, m_H) = {np.array2string(row, precision=5)}, relative error vs "
            f"central differences {relative_error(row, check):.1e}"
        )
    return v


def step(
    jacobian: np.ndarray, residual: np.ndarray, u: np.ndarray, bounds: np.ndarray, damping: float
) -> np.ndarray:
    """The Levenberg-Marquardt step: du minimising |J du + r|² + μ |du|² (J the Jacobian in
    u, μ = `damping`; as μ → 0 the minimum-norm Gauss-Newton step −J⁺ r). A coordinate at a
    bound that the step would push out is held there and the step recomputed without it."""
    free = np.ones(len(u), dtype=bool)
    while True:
        du = np.zeros(len(u))
        system = np.vstack([jacobian[:, free], np.sqrt(damping) * np.eye(free.sum())])
        rhs = np.concatenate([-residual, np.zeros(free.sum())])
        du[free] = np.linalg.lstsq(system, rhs, rcond=None)[0]
        pushed = ((u <= bounds[:, 0]) & (du < 0)) | ((u >= bounds[:, 1]) & (du > 0))
        if not pushed.any():
            return du
        free &= ~pushed


def search(
    eigen: Eigen, p0: np.ndarray, target: np.ndarray, v: np.ndarray
) -> tuple[np.ndarray, bool]:
    """Levenberg-Marquardt in u = p / p₀ (module docstring) from the benchmark towards the
    design whose (v_w, v_c) is `target`: a step that decreases |r| is taken and μ divided by
    3, else μ is multiplied by 4. Prints the steps taken; returns the design reached and
    whether it meets the target (|r| < `TOL`) — if not, the steps stalled (|r| falling by
    less than `STALL` in a step: a local minimum of |r| in the bounds) or `MAX_STEPS` ran
    out."""
    u, bounds, damping = np.ones(3), BOUNDS / p0[:, None], DAMPING
    v, jacobian = speeds(eigen, p0, tuple(v))
    decrease = np.inf
    print(f"search for (v_w, v_c) = ({target[0]}, {target[1]}) m/s")
    for iteration in itertools.count():
        residual = v - target
        c, lam, mH = u * p0
        print(
            f"  {iteration:2d}: c = {c:.5f} m, head angle {90 - np.rad2deg(lam):.4f}°, "
            f"m_H = {mH:.4f} kg; v_w = {v[0]:.9f}, v_c = {v[1]:.9f} m/s, "
            f"|r| = {np.linalg.norm(residual):.1e}, μ = {damping:.0e}"
        )
        if np.linalg.norm(residual) < TOL:
            return u * p0, True
        if not decrease > STALL or iteration == MAX_STEPS:
            print(f"  stopped: |r| fell by {max(decrease, 0.0):.1e} m/s in the last step")
            return u * p0, False
        while damping < 1e8:
            du = step(jacobian * p0, residual, u, bounds, damping)
            trial = np.clip(u + du, bounds[:, 0], bounds[:, 1])
            try:
                v_trial, j_trial = speeds(eigen, trial * p0, tuple(v))
                decrease = np.linalg.norm(residual) - np.linalg.norm(v_trial - target)
            except RuntimeError:
                decrease = -np.inf
            if decrease > 0:
                u, v, jacobian, damping = trial, v_trial, j_trial, damping / 3
                break
            damping *= 4


def scan(eigen: Eigen, p: np.ndarray) -> np.ndarray:
    """The eigenvalues at the speeds `SCAN` (rows)."""
    return np.stack([eigen(np.append(p, v))[0] for v in SCAN])


def stable_range(eigen: Eigen, p: np.ndarray, loci: np.ndarray) -> list[float]:
    """The speeds where max Re s(v) changes sign, from the scan, refined by Brent's method."""
    largest = np.max(loci.real, axis=1)
    changes = np.flatnonzero(np.sign(largest[:-1]) != np.sign(largest[1:]))
    return [
        brentq(lambda v: float(np.max(eigen(np.append(p, v))[0].real)), SCAN[i], SCAN[i + 1],
               xtol=1e-13, rtol=1e-15)
        for i in changes
    ]  # fmt: skip


def figure(loci: dict[str, tuple[np.ndarray, np.ndarray]], path: Path) -> None:
    """Re s and Im s against v for each design (the benchmark, and after each search)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharex=True)
    for (label, (values, window)), color in zip(loci.items(), COLORS, strict=False):
        for ax, part in zip(axes, (values.real, values.imag), strict=True):
            ax.plot(SCAN, part, ".", ms=2.5, color=color)
            ax.plot([], [], ".", color=color, label=label)
        for end in window:
            axes[0].axvline(end, color=color, lw=0.8, ls="--")
    axes[0].set_ylim(-10, 10)
    axes[0].axhline(0.0, color="k", lw=0.5)
    axes[0].set_ylabel("Re s (1/s)")
    axes[1].set_ylabel("Im s (rad/s)")
    for ax in axes:
        ax.set_xlabel("v (m/s)")
        ax.legend()
    fig.suptitle("Benchmark bicycle: lean/steer eigenvalues (dashed: self-stable range)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--window", type=float, nargs=2, action="append", metavar=("V_W", "V_C"),
        help="target (v_w, v_c) in m/s, repeatable (default: 3 3.5 and 3 6.5)",
    )  # fmt: skip
    parser.add_argument(
        "--figure", type=Path, default=Path("results/bicycle_design_loci.png"),
        help="where the eigenvalue loci are saved",
    )  # fmt: skip
    parser.add_argument(
        "--linear", action="store_true",
        help="the published linear model in place of the 3-D one (seconds, nothing compiled)",
    )  # fmt: skip
    args = parser.parse_args()
    windows = args.window or [(3.0, 3.5), (3.0, 6.5)]

    p0 = np.array([bicycle.DEFAULTS[k] for k in DESIGN])
    start = time.perf_counter()
    if args.linear:
        eigen = linear_eigen
        print("the published linear model, Richardson differences (no gradient check)")
    else:
        eigen, seconds = compile_eigen(bicycle.bicycle())
        print(
            "program x ↦ (s, ∂s/∂x): trace {trace:.1f} s, compile {compile:.1f} s, "
            "first call {first_call:.3f} s".format(**seconds)
        )
        start = time.perf_counter()
        for _ in range(20):
            eigen(np.append(p0, 5.0))
        print(f"  one call: {(time.perf_counter() - start) / 20 * 1e3:.1f} ms")
        start = time.perf_counter()
        check_gradients(eigen, p0)
    v0 = check_speed_gradients(eigen, p0)
    print(f"gradient checks: {time.perf_counter() - start:.1f} s")
    designs = {"benchmark": p0}
    for window in windows:
        start = time.perf_counter()
        p, reached = search(eigen, p0, np.array(window), v0)
        label = "reached" if reached else "not reached"
        designs[f"({window[0]:g}, {window[1]:g}) m/s, {label}"] = p
        print(f"search: {time.perf_counter() - start:.1f} s")

    start = time.perf_counter()
    loci = {}
    for label, design in designs.items():
        values = scan(eigen, design)
        window = stable_range(eigen, design, values)
        loci[label] = (values, window)
        ends = ", ".join(f"{end:.9f}" for end in window)
        print(f"scan of max Re s, {label}: sign changes at {ends} m/s")
    figure(loci, args.figure)
    print(f"scans and figure ({args.figure}): {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
