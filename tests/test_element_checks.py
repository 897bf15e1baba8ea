"""What the builders check (DESIGN §9). Bad force elements are refused when the mechanism
is built, naming the element, the parameter and the shapes: a parameter of the wrong shape,
a missing key, a callable's force of the wrong shape, an element of the other dimension. A
singular reference configuration is warned about, with its rank and the rank nearby."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs
from jaxmbs.model.joints import forces, planar, spatial


def on_a_rail(element, params=None):
    """A planar body on a prismatic joint along x with one force element."""
    rail = planar.Translational("rail", None, (0.0, 0.0), (1.0, 0.0), 0)
    return planar.planar_mechanism(
        [planar.Body("mass", 2.0, 0.1)], [rail], params, gravity=(0.0, 0.0), elements=[element]
    )


def free_body(element, params=None):
    """A free spatial body with one force element."""
    body = spatial.Body("block", 1.0, (0.1, 0.2, 0.3))
    return spatial.spatial_mechanism([body], [], params, elements=[element])


@pytest.mark.parametrize(
    ("element", "params", "message"),
    [
        # Two stiffnesses on a scalar spring ran as k = 300 with two columns of force.
        (
            forces.SpringDamper("spring", stiffness=(100.0, 200.0), body_j=0),
            None,
            r"'spring' \(SpringDamper in a planar mechanism\): stiffness must have shape \(\), "
            r"got shape \(2,\)",
        ),
        (
            forces.SpringDamper("spring", damping="c", body_j=0),
            {"c": np.ones(3)},
            r"'spring'.*damping must have shape \(\), got shape \(3,\) \(the parameter 'c'\)",
        ),
        (
            forces.SpringDamper("spring", stiffness=1.0, body_j=0, point_j=(0.0, 0.0, 0.0)),
            None,
            r"'spring'.*point_j must have shape \(2,\), got shape \(3,\)",
        ),
        (
            forces.SpringDamper("spring", free_length=lambda p: jnp.ones(2), body_j=0),
            None,
            r"'spring'.*free_length must have shape \(\), got shape \(2,\)",
        ),
        (
            forces.RotationalSpringDamper("torsion", body_j=0, free_angle=(0.1, 0.2)),
            None,
            r"'torsion'.*free_angle must have shape \(\), got shape \(2,\)",
        ),
        (
            forces.SpringDamper("motor", body_j=0, actuator=lambda t, q, qd, p: q[:2]),
            None,
            r"'motor'.*actuator must return shape \(\), got shape \(2,\)",
        ),
        (
            forces.SpringDamper("stop", body_j=0, law=lambda d, dd, p: jnp.stack([d, dd])),
            None,
            r"'stop'.*law must return shape \(\), got shape \(2,\)",
        ),
        (
            forces.PointForce("push", 0, (1.0, 2.0, 3.0)),
            None,
            r"'push' \(PointForce in a planar mechanism\): load must have shape \(2,\), "
            r"got shape \(3,\)",
        ),
        (
            forces.PointForce("push", 0, lambda t, q, qd, p: q),
            None,
            r"'push'.*load must return shape \(2,\), got shape \(3,\)",
        ),
        (
            forces.BodyTorque("twist", 0, (0.0, 0.0, 1.0)),
            None,
            r"'twist'.*load must have shape \(\), got shape \(3,\)",
        ),
    ],
)
def test_planar_parameter_shapes_are_checked(element, params, message):
    with pytest.raises(ValueError, match=message):
        on_a_rail(element, params)


@pytest.mark.parametrize(
    ("element", "message"),
    [
        (
            forces.Bushing("mount", stiffness=np.eye(5), body_j=0),
            r"'mount' \(Bushing in a spatial mechanism\): stiffness must have shape \(\) or "
            r"\(6,\) or \(6, 6\), got shape \(5, 5\)",
        ),
        (
            forces.Bushing("mount", rest_rotation=np.eye(2), body_j=0),
            r"'mount'.*rest_rotation must have shape \(3, 3\), got shape \(2, 2\)",
        ),
        (
            # the default points are planar ones: a spatial spring needs its own
            forces.SpringDamper("spring", stiffness=1.0, body_j=0),
            r"'spring' \(SpringDamper in a spatial mechanism\): point_i must have shape \(3,\), "
            r"got shape \(2,\)",
        ),
        (
            forces.RotationalSpringDamper("torsion", body_j=0, axis_i=(0.0, 1.0)),
            r"'torsion'.*axis_i must have shape \(3,\), got shape \(2,\)",
        ),
        (
            forces.BodyTorque("twist", 0, lambda t, q, qd, p: t),
            r"'twist'.*load must return shape \(3,\), got shape \(\)",
        ),
    ],
)
def test_spatial_parameter_shapes_are_checked(element, message):
    with pytest.raises(ValueError, match=message):
        free_body(element)


def test_the_shapes_an_element_accepts_build():
    """A number, a diagonal or a 6 × 6 matrix for a bushing; keys and callables of the
    parameters; a torque's planar reference vectors are ignored in the plane."""
    for K in (1.0, np.ones(6), np.eye(6)):
        free_body(forces.Bushing("mount", stiffness=K, damping="c", body_j=0), {"c": np.ones(6)})
    point = lambda p: (p["r"], 0.0)  # noqa: E731
    spring = forces.SpringDamper("spring", stiffness="k", body_j=0, point_j=point)
    assert on_a_rail(spring, {"k": 1.0, "r": 0.1}).elements is not None
    on_a_rail(forces.RotationalSpringDamper("torsion", body_j=0, axis_i=(0.0, 1.0)))


@pytest.mark.parametrize(
    ("stiffness", "params", "message"),
    [
        ("kk", {"k": 1.0, "c": 0.5}, r"stiffness is the parameter 'kk', which is missing; "
         r"the parameters are \['c', 'k'\]"),
        (lambda p: 2 * p["kk"], {"k": 1.0}, r"stiffness looks up the parameter 'kk', which is "
         r"missing; the parameters are \['k'\]"),
        ("k", None, r"stiffness is the parameter 'k', which is missing; the mechanism has no "
         r"parameters \(params=None\)"),
    ],
    ids=["key", "callable", "no params"],
)  # fmt: skip
def test_a_missing_parameter_key_is_named_with_the_keys_there_are(stiffness, params, message):
    spring = forces.SpringDamper("spring", stiffness=stiffness, body_j=0)
    with pytest.raises(ValueError, match="force element 'spring': " + message):
        on_a_rail(spring, params)


def test_a_missing_key_in_an_actuator_is_named():
    motor = forces.RotationalSpringDamper(
        "motor", body_j=0, actuator=lambda t, q, qd, p: p["torque"] * t
    )
    with pytest.raises(ValueError, match=r"'motor': actuator looks up the parameter 'torque'"):
        on_a_rail(motor, {"tau": 1.0})


def test_other_parameters_are_checked_as_the_builder_did():
    """`ElementSet.check`: the check a run's `params=` or `replace_params` needs."""
    mech = on_a_rail(forces.SpringDamper("spring", stiffness="k", body_j=0), {"k": 1.0})
    mech.elements.check({"k": 2.0}, mech.n)
    with pytest.raises(ValueError, match=r"'spring'.*stiffness must have shape \(\), got"):
        mech.elements.check({"k": np.ones(2)}, mech.n)
    with pytest.raises(ValueError, match=r"'spring': stiffness is the parameter 'k', which is"):
        mech.elements.check({"kk": 2.0}, mech.n)


def test_a_bushing_in_a_planar_mechanism_is_refused():
    bushing = forces.Bushing("mount", stiffness=1.0, body_j=0)
    with pytest.raises(ValueError, match="'mount': a Bushing acts in spatial mechanisms, not in "):
        on_a_rail(bushing)


# An isosceles slider-crank (crank = rod = R): with the crank upright the rod reaches down to
# the pivot, where the branch "slider at the pivot" crosses the ordinary one and C loses a
# rank (Φ's closure x_B (x_B − 2R cos θ) = 0 has a double root at θ = π/2, x_B = 0).
R = 0.3
Z, X, Y, O = (0.0, 0.0, 1.0), (1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 0.0)


def _ends(theta: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Crank tip A, slider B (on the ordinary branch x_B = 2R cos θ) and the rod's angle."""
    A = R * np.array([np.cos(theta), np.sin(theta)])
    B = np.array([2 * R * np.cos(theta), 0.0])
    return A, B, float(np.arctan2(B[1] - A[1], B[0] - A[0]))


def planar_crank(theta: float):
    A, B, phi = _ends(theta)
    q = np.array([*A / 2, theta, *(A + B) / 2, phi, *B, 0.0])
    bodies = [planar.Body(name, 1.0, 0.01) for name in ("crank", "rod", "slider")]
    joints = [
        planar.Revolute("O", 0, (-R / 2, 0.0)),
        planar.Revolute("A", 0, (R / 2, 0.0), 1, (-R / 2, 0.0)),
        planar.Revolute("B", 1, (R / 2, 0.0), 2, (0.0, 0.0)),
        planar.Translational("P", None, (0.0, 0.0), (1.0, 0.0), 2),
    ]
    return planar.planar_mechanism(bodies, joints, reference_q=q), q


def spatial_crank(theta: float):
    """The same crank of Euler-parameter bodies on revolutes about z: three redundant rows
    at every configuration (a planar loop of spatial joints), four at the singular one."""

    def turned(angle):
        c, s = np.cos(angle), np.sin(angle)
        return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])

    A, B, phi = _ends(theta)
    A, B = np.append(A, 0.0), np.append(B, 0.0)
    q = np.concatenate([
        spatial.pose(A / 2, turned(theta)), spatial.pose((A + B) / 2, turned(phi)),
        spatial.pose(B, np.eye(3)),
    ])  # fmt: skip
    bodies = [spatial.Body(name, 1.0, 0.01) for name in ("crank", "rod", "slider")]
    joints = [
        spatial.Revolute("O", None, O, Z, 0, (-R / 2, 0.0, 0.0), Z),
        spatial.Revolute("A", 0, (R / 2, 0.0, 0.0), Z, 1, (-R / 2, 0.0, 0.0), Z),
        spatial.Revolute("B", 1, (R / 2, 0.0, 0.0), Z, 2, O, Z),
        spatial.Translational("P", None, O, X, Y, 2, O, X, Y),
    ]
    return spatial.spatial_mechanism(bodies, joints, reference_q=q), q


@pytest.mark.parametrize(
    ("build", "rank"), [(planar_crank, 7), (spatial_crank, 19)], ids=["planar", "spatial"]
)
def test_a_singular_reference_configuration_is_warned_about(build, rank):
    with pytest.warns(UserWarning) as caught:
        mech, q = build(np.pi / 2)
    message = str(caught[0].message)
    assert message.startswith("reference_q is a singular configuration")
    assert f"C has rank {rank} there and rank {rank + 1} at assembled configurations" in message
    assert (
        mech.structure.rank == rank == jaxmbs.analyze_solvability(mech, q).rank
    )  # what analyze_solvability says
    with warnings.catch_warnings():  # a generic configuration: silent, redundant or not
        warnings.simplefilter("error")
        mech, _ = build(1.0)
    assert mech.structure.rank == rank + 1
