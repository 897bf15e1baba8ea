"""The McPherson quarter car (issue 26): static point, linearisation against the textbook
2-DOF quarter car, the tyre's lift-off, and the suspension study's gradient.

Independent references: the equilibrium conditions themselves (Q − Cᵀλ = 0, Φ = 0), the
textbook model's closed-form eigenproblem with the rates and masses read off the model's
energy along the wheel travel (no linearisation code), central differences of the compiled
objective. The gradient check is in `test_quarter_car_gradient.py` (split so that
pytest-xdist's workers, each given whole modules, balance).
"""

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs
from jaxmbs.model.joints import forces
from jaxmbs.models import mcpherson

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "experiments"))
import suspension_design as study  # noqa: E402


@pytest.fixture(scope="module")
def car():
    road = study.study_road()
    mech = mcpherson.quarter_car(road)
    return mech, road, mcpherson.static_configuration(mech)


def weight(p):
    return p["g"] * sum(p[f"m{i}"] for i in range(1, 6))


def test_static_point(car):
    """Q − Cᵀλ = 0 (λ by least squares) and Φ = 0 at the equilibrium; the preload keeps the
    design ride height; the tyre carries the whole weight."""
    mech, road, q = car
    p = mech.params
    C = jaxmbs.constraint_jacobian(mech, q, 0.0, p)
    Q = mech.forces(0.0, q, jnp.zeros_like(q), p)
    unbalanced = Q - C.T @ jnp.linalg.lstsq(C.T, Q)[0]
    assert float(jnp.max(jnp.abs(unbalanced))) < 1e-12 * weight(p)
    assert float(jnp.max(jnp.abs(mech.constraints(0.0, q, p)))) < 1e-12
    design = mcpherson.design_configuration(p, "zxz", mcpherson.QUARTER_CAR_BODIES)
    assert float(jnp.max(jnp.abs(q - design))) < 1e-4  # near the design position
    load = mcpherson.tyre_load(road, "zxz", 0.0, q, jnp.zeros_like(q), p)
    assert abs(float(load) / weight(p) - 1) < 1e-9
    assert mech.n - jnp.linalg.matrix_rank(C) == 2  # heave and wheel travel


def test_linearization_against_the_textbook_quarter_car(car, record_property):
    """Undamped natural frequencies of `jaxmbs.linearize` at the static point against the
    textbook quarter car, m_s z̈_s = −k_w (z_s − z_u), m_u z̈_u = k_w (z_s − z_u) − k_t z_u,
    with k_w, m_s, m_u, k_t from the model (`textbook_parameters`): within 1e-3. The textbook
    leaves out the inertial coupling M₂₀₁; with it, the 2 × 2 model is the exact reduction
    (1e-8). The plain k MR², without the preload's geometric term, is ~13 % stiffer off."""
    mech, road, q = car
    p = {**mech.params, "c_damper": 0.0, "c_tyre": 0.0}
    lin = jaxmbs.linearize(mech, q, jnp.zeros_like(q), params=p)
    tb = mcpherson.textbook_parameters(mech, road, q, p)
    k_w, k_t = tb["k_w"], tb["k_tyre"]
    K = np.array([[k_w, -k_w], [-k_w, k_w + k_t]])

    def frequencies(M, K=K):
        return np.sqrt(np.sort(np.linalg.eigvals(np.linalg.solve(M, K)).real))

    textbook = frequencies(np.diag([tb["m_s"], tb["m_u"]]))
    coupled = np.diag([tb["m_s"], tb["m_u"]]) + tb["coupling"] * (1 - np.eye(2))
    error = np.max(np.abs(textbook / lin.frequencies - 1))
    record_property("frequencies_rad_s", lin.frequencies.tolist())
    record_property("textbook_rad_s", textbook.tolist())
    record_property("relative_error", float(error))
    assert lin.frequencies.shape == (2,)
    assert error < 1e-3
    assert np.max(np.abs(frequencies(coupled) / lin.frequencies - 1)) < 1e-8
    assert abs(tb["motion_ratio"]) > 0.5
    assert abs(p["k_spring"] * tb["motion_ratio"] ** 2 / k_w - 1) > 0.05  # the preload matters


def test_tyre_lift_off_is_smooth_and_zero_off_the_road(car):
    """The one-sided tyre law: differentiable through contact (its autodiff slope matches
    centred differences of the force on a 1 µm grid — a kink, max(δ, 0), would miss by k/2),
    the slope rising from 0 to k_t, the linear tyre in contact, and (numerically) no force once
    the tyre has left the road; in the model, the wheel lifted 5 cm with the chassis held
    (3 cm clear of the road) feels no tyre force."""
    mech, road, q = car
    p = mech.params
    law = forces.one_sided("k_tyre", 0.0, "c_tyre", "tyre_sharpness")
    delta = jnp.linspace(-0.01, 0.01, 20001)
    force = jax.vmap(lambda d: law(d, -0.5, p))(delta)
    slope = jax.vmap(jax.grad(lambda d: law(d, -0.5, p)))(delta)
    centred = (force[2:] - force[:-2]) / (2 * (delta[1] - delta[0]))
    assert float(jnp.max(jnp.abs(slope[1:-1] - centred))) < 1e-3 * p["k_tyre"]
    assert float(slope[0]) < 1e-4 * p["k_tyre"] and abs(float(slope[-1]) / p["k_tyre"] - 1) < 1e-3
    # 5–10 mm off the road: at most k ε²/(4 · 5 mm) = 0.1 N, falling as 1/|δ| (measured
    # 0.090 N on the first 2.5 mm of that range, the part checked)
    assert float(jnp.max(jnp.abs(force[:5000]))) < 0.1
    in_contact = delta > 0.005
    linear = p["k_tyre"] * delta - 0.5 * p["c_tyre"]
    assert float(jnp.max(jnp.abs(force - linear)[in_contact])) < 1e-4 * weight(p)
    lifted = mcpherson.travel_configuration(mech, q, 0.05)
    assert float(mcpherson.tyre_deflection(road, "zxz", 0.0, lifted, p)) < -0.025
    load = mcpherson.tyre_load(road, "zxz", 0.0, lifted, jnp.zeros_like(q), p)
    assert 0.0 <= float(load) < 1e-5 * weight(p)
