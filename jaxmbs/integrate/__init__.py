"""Integration: the `simulate` core, stabilisation, solver wrappers, events, the `Solution`
and its result codes; coordinate partitioning and closing conditions with switching."""

from .closing import simulate_closing as simulate_closing
from .dynamics import accelerations as accelerations
from .dynamics import accelerations_and_multipliers as accelerations_and_multipliers
from .partitioned import simulate_partitioned as simulate_partitioned
from .simulate import simulate as simulate
from .solution import RESULTS as RESULTS
from .solution import Solution as Solution
from .stabilization import STABILIZATIONS as STABILIZATIONS
from .stabilization import AbstractStabilization as AbstractStabilization
from .stabilization import Baumgarte as Baumgarte
from .stabilization import NoStabilization as NoStabilization
from .stabilization import Projection as Projection
from .stabilization import get_stabilization as get_stabilization
from .stabilization import project_positions as project_positions
from .stabilization import project_state as project_state
from .stabilization import project_velocities as project_velocities
from .switching import Switching as Switching
