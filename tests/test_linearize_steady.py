"""`linearize` about a steady motion, jitted and differentiated: a thin uniform disc (mass m,
radius r, I_diam = A = m r²/4, I_axis = C = m r²/2; `RollingDisc`, ZXZ angles) rolling
upright at spin Ω (speed v = Ω r).

Closed form. With lean θ, heading φ and spin ψ, the disc's equations linearised about upright
rolling (Neimark and Fufaev, *Dynamics of Nonholonomic Systems*, 1972, ch. III §1; O'Reilly,
Nonlinear Dynamics 10, 1996, eq 37) are

    (A + m r²) θ̈ = m g r θ − (C + m r²) Ω φ̇,    A φ̈ = C Ω θ̇,    (C + m r²) ψ̈ = 0,

(the lean couples to the heading through the gyroscopic and the no-slip terms; the spin
rate is constant to first order). In the reduced state (θ; θ̇, φ̇, ψ̇) — x, y, heading and
spin cyclic — the characteristic polynomial is s² [(A + m r²) s² + C (C + m r²) Ω² / A −
m g r], so the eigenvalues are 0, 0 (the family of steady motions: any heading rate zero,
any spin) and ±iω_n with

    ω_n² = [C (C + m r²) Ω² / A − m g r] / (A + m r²)  =  4/5 (3 Ω² − g / r)

for the thin uniform disc: stable (ω_n real) above Ω_c² = g / (3 r), i.e. v_c² = g r / 3;
below, a pair ±σ, σ² = 4/5 (g / r − 3 Ω²). Derivatives: ∂ω_n/∂Ω = 12 Ω / (5 ω_n) (the state
moves with Ω: a traced state), ∂ω_n/∂g = −2 / (5 r ω_n) (a parameter).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs
from jaxmbs.model.joints import rolling, spatial

G, R, M = 9.81, 0.2, 1.5
CRITICAL = np.sqrt(G / (3 * R))  # Ω_c
CYCLIC = ("disc.x", "disc.y", "disc.phi", "disc.psi")
NAMES = {"positions": ("disc.theta",), "velocities": ("disc.phi", "disc.theta", "disc.psi")}
SPINS = CRITICAL * np.array([0.5, 0.9, 1.1, 2.0, 4.0])


def closed_form(spin: float, g: float = G) -> np.ndarray:
    """0, 0, ±√(−ω_n²) (module docstring), sorted as `Linearization.eigenvalues`."""
    root = np.sqrt(complex(-0.8 * (3 * spin**2 - g / R)))
    return np.array([0.0, 0.0, -root, root])


@pytest.fixture(scope="module")
def disc():
    """The disc (ZXZ angles: φ heading, θ = π/2 upright, ψ spin) with g a parameter, and
    one compiled program: (Ω, g) ↦ (ω_n and its derivatives by forward mode, the eigenvalues)."""
    upright = spatial.pose([0.0, 0.0, R], np.array([[1.0, 0, 0], [0, 0, -1], [0, 1, 0]]), "zxz")
    mech = spatial.spatial_mechanism(
        [spatial.Body("disc", M, (M * R**2 / 4, M * R**2 / 4, M * R**2 / 2), "zxz")],
        [rolling.RollingDisc("wheel", 0, radius=R, axis=(0.0, 0.0, 1.0))],
        {"g": G},
        gravity=lambda p: jnp.stack([0.0, 0.0, -p["g"]]),
        reference_q=upright,
    )

    def frequency(x):
        spin, g = x[0], x[1]
        q = jnp.asarray(upright)
        qd = jnp.stack([spin * R, 0.0, 0.0, 0.0, 0.0, -spin])  # v = Ω r, ψ̇ = −Ω
        lin = jaxmbs.linearize(mech, q, qd, params={"g": g}, cyclic=CYCLIC, **NAMES)
        omega, _, oscillating = lin.modes()
        return jnp.max(jnp.where(oscillating, omega, 0.0)), lin.eigenvalues

    return mech, upright, jax.jit(jax.jacfwd(frequency, has_aux=True))


def sorted_like(s) -> np.ndarray:
    s = np.asarray(s)
    return s[np.lexsort((s.imag, np.round(np.abs(s), 9)))]


def test_eigenvalues_of_upright_rolling_against_the_closed_form(disc, record_property):
    """Below and above the critical speed v_c² = g r / 3: 0, 0, ±iω_n (or ±σ) to 1e-10."""
    _, _, program = disc
    worst = 0.0
    for spin in SPINS:
        _, eigenvalues = program(jnp.array([spin, G]))
        error = np.max(np.abs(sorted_like(eigenvalues) - sorted_like(closed_form(spin))))
        worst = max(worst, float(error))
    record_property("disc_eigenvalue_error", worst)
    assert worst < 1e-10
    # Stable (purely imaginary pair) exactly above Ω_c: the pair's real parts vanish there.
    _, below = program(jnp.array([0.99 * CRITICAL, G]))
    _, above = program(jnp.array([1.01 * CRITICAL, G]))
    assert float(np.max(np.asarray(below).real)) > 0.1
    assert float(np.max(np.abs(np.asarray(above).real))) < 1e-10


def test_frequency_gradient_against_the_closed_form_and_central_differences(disc, record_property):
    """∂ω_n/∂Ω (traced state) and ∂ω_n/∂g (parameter) by forward mode through `linearize`,
    against the closed form and central differences of the same compiled program."""
    _, _, program = disc
    x = np.array([2.0 * CRITICAL, G])
    gradient, _ = program(jnp.asarray(x))
    gradient = np.asarray(gradient)
    omega = np.sqrt(0.8 * (3 * x[0] ** 2 - x[1] / R))
    analytic = np.array([12 * x[0] / (5 * omega), -2 / (5 * R * omega)])
    h = 1e-5 * np.abs(x)

    def omega_at(point):
        return float(np.max(np.abs(np.asarray(program(jnp.asarray(point))[1]).imag)))

    central = np.array(
        [
            (omega_at(x + h[i] * e) - omega_at(x - h[i] * e)) / (2 * h[i])
            for i, e in enumerate(np.eye(2))
        ]
    )
    analytic_error = float(np.max(np.abs(gradient - analytic) / np.abs(analytic)))
    central_error = float(np.max(np.abs(gradient - central) / np.abs(analytic)))
    record_property("disc_gradient_error_vs_closed_form", analytic_error)
    record_property("disc_gradient_error_vs_central_differences", central_error)
    assert analytic_error < 1e-10
    assert central_error < 1e-7


def test_cyclic_coordinates_recognised_and_bad_names_refused(disc):
    """`cyclic="auto"` finds x, y and the spin ψ (nothing depends on them); the heading φ
    rotates the no-slip rows, so it stays in the reduced state, with one more zero
    eigenvalue. Unknown names, velocities the constraints cannot complete, and an unnamed
    choice under jit with Pfaffian rows are refused before the state matrix compiles."""
    mech, upright, _ = disc
    spin = 2.0 * CRITICAL
    qd = np.array([spin * R, 0.0, 0.0, 0.0, 0.0, -spin])
    lin = jaxmbs.linearize(mech, upright, qd, cyclic="auto")
    assert lin.cyclic == ("disc.x", "disc.y", "disc.psi")
    assert lin.positions == ("disc.phi", "disc.theta")
    expected = np.concatenate([[0.0], closed_form(spin)])
    np.testing.assert_allclose(sorted_like(lin.eigenvalues), sorted_like(expected), atol=1e-10)
    np.testing.assert_allclose(lin.frequencies, [np.sqrt(0.8 * (3 * spin**2 - G / R))], rtol=1e-10)
    with pytest.raises(ValueError, match=r"cyclic names unknown coordinates \['heading'\]"):
        jaxmbs.linearize(mech, upright, qd, cyclic=("heading",))
    with pytest.raises(ValueError, match="named velocities are not independent"):
        # ẋ with θ̇ and ψ̇: the no-slip rows cannot give ẏ, φ̇ (a singular block of C)
        velocities = ("disc.x", "disc.theta", "disc.psi")
        jaxmbs.linearize(mech, upright, qd, cyclic=CYCLIC, velocities=velocities)
    with pytest.raises(ValueError, match="must be named: positions="):
        jax.jit(lambda q: jaxmbs.linearize(mech, q, qd, cyclic=CYCLIC).A)(jnp.asarray(upright))
