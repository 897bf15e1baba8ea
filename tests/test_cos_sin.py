"""`cos_sin` of the joint builders: the values and every derivative of cos φ and sin φ, with
no trigonometric call added by differentiation, and none duplicated by XLA into the
consumers of the vmapped constraint Jacobian and Γ."""

import re

import jax
import jax.numpy as jnp
import numpy as np

from jaxmbs.kinematics import constraint_jacobian, residuals_and_gamma
from jaxmbs.model.joints import cos_sin
from jaxmbs.models import fourbar


def _reference(angle):
    """cos and sin as JAX differentiates them (a fresh trigonometric call per derivative)."""
    return jnp.cos(angle), jnp.sin(angle)


def _second_directional(f, angle, direction):
    """d²/dε² f(angle + ε direction) at ε = 0 (jvp of jvp), with the first derivative."""

    def first(a):
        return jax.jvp(f, (a,), (direction,))[1]

    return jax.jvp(first, (angle,), (direction,))


ANGLES = np.array([-2.5, 0.0, 0.3, 1.2, 3.9, -np.pi / 2, np.pi])
DIRECTION = np.array([1.0, -0.5, 2.0, 0.25, 1.5, -3.0, 0.7])


def test_values_and_derivatives_match_cos_and_sin():
    """Against NumPy's cos and sin at the same angles (to an ulp or two: XLA's and the C
    library's implementations may round differently) and the analytic derivatives along d:
    d/dε (cos, sin)(φ + εd) = (−sin φ, cos φ) d and d²/dε² = (−cos φ, −sin φ) d²."""
    angle, direction = jnp.asarray(ANGLES), jnp.asarray(DIRECTION)
    c, s, d = np.cos(ANGLES), np.sin(ANGLES), DIRECTION
    for got, expected in zip(cos_sin(angle), (c, s), strict=True):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)
    first, second = _second_directional(cos_sin, angle, direction)
    for got, expected in zip(first, (-s * d, c * d), strict=True):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15 * np.max(np.abs(d)))
    for got, expected in zip(second, (-c * d**2, -s * d**2), strict=True):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15 * np.max(d**2))
    # d/dφ of cos φ sin φ is cos 2φ; reverse mode and its Hessian go through the rule too
    product = lambda a: jnp.sum(jnp.prod(jnp.stack(cos_sin(a)), axis=0))  # noqa: E731
    np.testing.assert_allclose(jax.grad(product)(angle), np.cos(2 * ANGLES), rtol=0, atol=2e-15)
    np.testing.assert_allclose(
        jax.hessian(product)(angle), np.diag(-2 * np.sin(2 * ANGLES)), rtol=0, atol=4e-15
    )


def _trigonometric_calls(f, *args) -> int:
    text = str(jax.make_jaxpr(f)(*args))  # nested jaxprs (custom rules) are printed inline
    return len(re.findall(r"= (?:sin|cos) ", text))


def test_derivatives_add_no_trigonometric_call():
    angle, direction = jnp.array([0.3, 1.2]), jnp.ones(2)
    second = lambda f: lambda a: _second_directional(f, a, direction)  # noqa: E731
    assert _trigonometric_calls(cos_sin, angle) == 2
    assert _trigonometric_calls(second(cos_sin), angle) == 2
    assert _trigonometric_calls(second(_reference), angle) > 2  # what cos_sin avoids


def test_vmapped_jacobian_and_gamma_evaluate_each_angle_once():
    """In the optimised program of the vmapped C and Γ of the four-bar, the only kernels that
    evaluate a cosine or sine are as large as the angles, 2 × B × 3: XLA did not fuse the
    trigonometry into larger consumers, where it runs once per consumer entry (before
    `cos_sin`, eight kernels of B × 4 and B × 4 × 4 entries did)."""
    mech = fourbar.fourbar()
    q0, qd0 = fourbar.initial_state(mech)

    def terms(q, qd):
        C = constraint_jacobian(mech, q, 0.0, mech.params)
        return C, residuals_and_gamma(mech, q, qd, 0.0, mech.params)[2]

    B = 64
    text = (
        jax.jit(jax.vmap(terms))
        .lower(jnp.tile(q0, (B, 1)), jnp.tile(qd0, (B, 1)))
        .compile()
        .as_text()
    )
    sizes = []
    for computation in re.split(r"\n(?=\S)", text):
        if re.search(r"\} (?:sine|cosine)\(", computation):
            root = re.search(r"ROOT \S+ = \w+\[([\d,]*)\]", computation).group(1)
            sizes.append(int(np.prod([int(d) for d in root.split(",")])))
    assert sizes and max(sizes) <= 2 * B * 3, sizes
