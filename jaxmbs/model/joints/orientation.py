"""Orientations of spatial bodies: rotation matrices, Euler parameters, ZXZ Euler angles.

Euler parameters (unit quaternions) e = (e₀, ē), ē = (e₁, e₂, e₃), eᵀe = 1, give the rotation
matrix (Haug 1989, eq 6.3.19; Nikravesh 1988, eq 6.21)

    A(e) = (2e₀² − 1) I + 2 (ē ēᵀ + e₀ ẽ),

with ẽ the cross-product matrix of ē (`parameter_rotation` evaluates it in a form that is
also a rotation off eᵀe = 1); e and −e are the same orientation, and no orientation is
singular. ZXZ Euler angles (φ, θ, ψ) give A = R_z(φ) R_x(θ) R_z(ψ), singular (gimbal lock) where
sin θ = 0. The conversions below go between the three; the NumPy ones (`euler_angles`,
`euler_parameters`) run outside jit, on concrete inputs, and check them.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..._internal.linalg import stack_matrix
from ..._internal.types import Array
from ._common import cos_sin


def rotation(angles) -> Array:
    """Rotation matrix A = R_z(φ) R_x(θ) R_z(ψ) of ZXZ Euler angles (φ, θ, ψ).

    Vectorised: `angles` of shape (..., 3) gives matrices of shape (..., 3, 3).
    """
    c, s = cos_sin(angles)
    cf, ct, cp = c[..., 0], c[..., 1], c[..., 2]
    sf, st, sp = s[..., 0], s[..., 1], s[..., 2]
    rows = (
        (cf * cp - sf * ct * sp, -cf * sp - sf * ct * cp, sf * st),
        (sf * cp + cf * ct * sp, -sf * sp + cf * ct * cp, -cf * st),
        (st * sp, st * cp, ct),
    )
    return stack_matrix(rows)


def parameter_rotation(e) -> Array:
    """Rotation matrix of Euler parameters e,

        A(e) = [(e₀² − ēᵀē) I + 2 ē ēᵀ + 2 e₀ ẽ] / (eᵀe),

    which where eᵀe = 1 is Haug's and Nikravesh's (2e₀² − 1) I + 2 (ē ēᵀ + e₀ ẽ). The numerator
    is the quadratic form of the quaternion rotation, orthogonal up to the factor eᵀe, so A is
    a rotation for every e ≠ 0 and does not change when e is scaled: (∂A/∂e) e = 0. A joint's
    rows then have no component along e, and the normalisation eᵀe − 1 = 0 (whose row is
    2eᵀ) is orthogonal to every joint row: its reaction is unique, and the joints' reactions
    hold no share of it, redundant joints or not.

    Vectorised: `e` of shape (..., 4) gives matrices of shape (..., 3, 3).
    """
    e0, e1, e2, e3 = e[..., 0], e[..., 1], e[..., 2], e[..., 3]
    d = e0 * e0 - e1 * e1 - e2 * e2 - e3 * e3
    rows = (
        (d + 2 * e1 * e1, 2 * (e1 * e2 - e0 * e3), 2 * (e1 * e3 + e0 * e2)),
        (2 * (e2 * e1 + e0 * e3), d + 2 * e2 * e2, 2 * (e2 * e3 - e0 * e1)),
        (2 * (e3 * e1 - e0 * e2), 2 * (e3 * e2 + e0 * e1), d + 2 * e3 * e3),
    )
    A = stack_matrix(rows)
    return A / jnp.sum(e * e, axis=-1)[..., None, None]


def body_rate_matrix(e) -> Array:
    """G(e) = [−ē, −ẽ + e₀ I], shape (..., 3, 4): the body angular velocity ω' = 2 G(e) ė
    (Nikravesh 1988, eq 6.98). G e = 0 and G Gᵀ = I where eᵀe = 1."""
    e0, e1, e2, e3 = e[..., 0], e[..., 1], e[..., 2], e[..., 3]
    rows = ((-e1, e0, e3, -e2), (-e2, -e3, e0, e1), (-e3, e2, -e1, e0))
    return stack_matrix(rows)


def zxz_rate_matrix(angles) -> tuple[Array, Array, Array]:
    """B(α) with ω' = B α̇ the body angular velocity of ZXZ angles α = (φ, θ, ψ), and its
    partial derivatives ∂B/∂θ, ∂B/∂ψ (B does not depend on φ), each of shape (..., 3, 3):

        B = [[sin θ sin ψ, cos ψ, 0], [sin θ cos ψ, −sin ψ, 0], [cos θ, 0, 1]].

    Singular at the gimbal lock sin θ = 0."""
    c, s = cos_sin(angles)
    ct, cp, st, sp = c[..., 1], c[..., 2], s[..., 1], s[..., 2]
    zero = jnp.zeros_like(ct)
    B = stack_matrix(((st * sp, cp, zero), (st * cp, -sp, zero), (ct, zero, zero + 1)))
    dB_theta = stack_matrix(((ct * sp, zero, zero), (ct * cp, zero, zero), (-st, zero, zero)))
    dB_psi = stack_matrix(((st * cp, -sp, zero), (-st * sp, -cp, zero), (zero, zero, zero)))
    return B, dB_theta, dB_psi


def parameter_rates(e, omega_body) -> Array:
    """Euler-parameter rates ė = ½ G(e)ᵀ ω' of a body angular velocity ω', shape (..., 4):
    the inverse of ω' = 2 G(e) ė (`body_rate_matrix`), since G Gᵀ = I; G e = 0 makes
    eᵀ ė = 0, the derivative of eᵀe = 1 (Nikravesh 1988, eq 6.98)."""
    return 0.5 * jnp.sum(body_rate_matrix(e) * omega_body[..., :, None], axis=-2)


def zxz_rates(angles, omega_body) -> Array:
    """ZXZ angle rates (φ̇, θ̇, ψ̇) of a body angular velocity ω', shape (..., 3).

    For A = R_z(φ) R_x(θ) R_z(ψ) the body angular velocity is
    ω' = (φ̇ sθ sψ + θ̇ cψ, φ̇ sθ cψ − θ̇ sψ, φ̇ cθ + ψ̇) (the vector of ω̃' = Aᵀ Ȧ), so
    φ̇ = (ω'ₓ sψ + ω'ᵧ cψ)/sθ, θ̇ = ω'ₓ cψ − ω'ᵧ sψ, ψ̇ = ω'_z − φ̇ cθ: infinite at the
    gimbal lock sin θ = 0, where the angles cannot follow every rotation.
    """
    c, s = cos_sin(angles)
    wx, wy, wz = omega_body[..., 0], omega_body[..., 1], omega_body[..., 2]
    phi_dot = (wx * s[..., 2] + wy * c[..., 2]) / s[..., 1]
    theta_dot = wx * c[..., 2] - wy * s[..., 2]
    return jnp.stack([phi_dot, theta_dot, wz - phi_dot * c[..., 1]], axis=-1)


def _check_matrix(matrix, name: str) -> np.ndarray:
    """`matrix` as a float64 NumPy array, refused unless it is a proper rotation: AᵀA = I to
    1e-10, or to 1000 ε of a lower precision it comes in (a float32 matrix: 1.2e-4)."""
    given = np.asarray(matrix)
    precision = given.dtype if np.issubdtype(given.dtype, np.floating) else np.float64
    A = given.astype(float)
    atol = max(1e-10, 1000 * float(np.finfo(precision).eps))
    if A.shape != (3, 3) or not np.allclose(A.T @ A, np.eye(3), atol=atol):
        raise ValueError(f"{name} needs a 3×3 rotation matrix")
    if np.linalg.det(A) < 0:
        raise ValueError(f"{name} needs a proper rotation (det A = +1), got a reflection")
    return A


def euler_angles(matrix) -> np.ndarray:
    """ZXZ Euler angles (φ, θ, ψ) of a rotation matrix, θ ∈ [0, π] (NumPy, outside jit).

    The third column of A is (sin φ sin θ, −cos φ sin θ, cos θ) and its third row
    (sin θ sin ψ, sin θ cos ψ, cos θ). Raises `ValueError` at the gimbal lock (sin θ ≈ 0).
    """
    A = _check_matrix(matrix, "euler_angles")
    theta = np.arccos(np.clip(A[2, 2], -1.0, 1.0))
    if np.sin(theta) < 1e-8:
        raise ValueError("gimbal lock: the ZXZ angles φ and ψ are not defined at sin θ = 0")
    return np.array([np.arctan2(A[0, 2], -A[1, 2]), theta, np.arctan2(A[2, 0], A[2, 1])])


def euler_parameters(matrix) -> np.ndarray:
    """Euler parameters e of a rotation matrix, with e₀ ≥ 0 (NumPy, outside jit).

    Shepperd's method (Shepperd 1978): of 4e₀² = 1 + tr A and 4eₖ² = 1 + 2Aₖₖ − tr A, the
    largest is taken as the pivot, and the other three parameters follow from sums and
    differences of off-diagonal entries divided by it, so no step divides by a small number.
    """
    A = _check_matrix(matrix, "euler_parameters")
    trace = np.trace(A)
    squares = np.array([1 + trace, *(1 + 2 * np.diag(A) - trace)]) / 4
    k = int(np.argmax(squares))
    pivot = np.sqrt(squares[k])
    # 4 eᵢ eⱼ from A: 4e₀eᵢ = Aₖⱼ − Aⱼₖ (i, j, k cyclic), 4eᵢeⱼ = Aᵢⱼ + Aⱼᵢ (i, j ≥ 1).
    products = np.empty((4, 4))
    products[0, 1:] = products[1:, 0] = A[2, 1] - A[1, 2], A[0, 2] - A[2, 0], A[1, 0] - A[0, 1]
    products[1:, 1:] = A + A.T
    e = products[k] / (4 * pivot)
    e[k] = pivot
    return e if e[0] >= 0 else -e


def zxz_to_euler_parameters(angles) -> Array:
    """Euler parameters of ZXZ angles: the product of the half-angle quaternions of R_z(φ),
    R_x(θ), R_z(ψ),

        e = (cos(θ/2) cos((φ+ψ)/2), sin(θ/2) cos((φ−ψ)/2), sin(θ/2) sin((φ−ψ)/2),
             cos(θ/2) sin((φ+ψ)/2)).

    Vectorised over the leading axes, differentiable; defined at the gimbal lock too.
    """
    phi, theta, psi = angles[..., 0], angles[..., 1], angles[..., 2]
    c, s = jnp.cos(theta / 2), jnp.sin(theta / 2)
    plus, minus = (phi + psi) / 2, (phi - psi) / 2
    return jnp.stack(
        [c * jnp.cos(plus), s * jnp.cos(minus), s * jnp.sin(minus), c * jnp.sin(plus)], axis=-1
    )


def euler_parameters_to_zxz(e) -> Array:
    """ZXZ angles (φ, θ, ψ), θ ∈ [0, π], of Euler parameters, by inverting
    `zxz_to_euler_parameters`: θ/2 = atan2(|(e₁, e₂)|, |(e₀, e₃)|), (φ+ψ)/2 = atan2(e₃, e₀),
    (φ−ψ)/2 = atan2(e₂, e₁).

    Vectorised over the leading axes. At the gimbal lock (e₁ = e₂ = 0, or e₀ = e₃ = 0) only
    φ + ψ (or φ − ψ) is defined; the undefined half is returned as 0 there.
    """
    e0, e1, e2, e3 = e[..., 0], e[..., 1], e[..., 2], e[..., 3]
    theta = 2 * jnp.arctan2(jnp.hypot(e1, e2), jnp.hypot(e0, e3))
    plus, minus = jnp.arctan2(e3, e0), jnp.arctan2(e2, e1)
    return jnp.stack([plus + minus, theta, plus - minus], axis=-1)
