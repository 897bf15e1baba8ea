"""`simulate(method="partitioned")` on the redundant McPherson struts matches `qr` to 1e-8
(split from `test_partitioning_switching.py` so that pytest-xdist's workers, each given whole
modules, balance)."""

from switching_cases import compare_with_qr

from jaxmbs.models import mcpherson


def test_mcpherson_struts_with_redundant_joints():
    """The redundant struts (redundancy 3, n = 30); the simplified ones share the code path
    and would only add a compilation."""
    mech = mcpherson.mcpherson(redundant=True)
    q0, qd0 = mcpherson.initial_state(mech)
    compare_with_qr(mech, q0, qd0, 0.3, None)
