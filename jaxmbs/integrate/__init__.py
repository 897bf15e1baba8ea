"""Integration: the one `simulate` core and its state spaces (all coordinates with a
formulation, partitioned coordinates, closing conditions), steppers (diffrax solvers,
generalized-α), stabilisation, solver wrappers, events, the `Solution` and its result codes."""

from .adjoint import DiscreteAdjoint as DiscreteAdjoint
from .closing_conditions import ClosingConditions as ClosingConditions
from .dynamics import accelerations as accelerations
from .dynamics import accelerations_and_multipliers as accelerations_and_multipliers
from .generalized_alpha import GeneralizedAlpha as GeneralizedAlpha
from .partitioned import PartitionedCoordinates as PartitionedCoordinates
from .simulate import simulate as simulate
from .simulate import simulate_closing as simulate_closing
from .simulate import simulate_partitioned as simulate_partitioned
from .solution import RESULT_NAMES as RESULT_NAMES
from .solution import RESULTS as RESULTS
from .solution import SimulationError as SimulationError
from .solution import Solution as Solution
from .solution import result_index as result_index
from .stabilization import STABILIZATIONS as STABILIZATIONS
from .stabilization import AbstractStabilization as AbstractStabilization
from .stabilization import Baumgarte as Baumgarte
from .stabilization import NoStabilization as NoStabilization
from .stabilization import Projection as Projection
from .stabilization import get_stabilization as get_stabilization
from .stabilization import project_positions as project_positions
from .stabilization import project_state as project_state
from .stabilization import project_velocities as project_velocities
from .state_space import AbstractStateSpace as AbstractStateSpace
from .state_space import AllCoordinates as AllCoordinates
from .steppers import AbstractStepper as AbstractStepper
from .switching import Switching as Switching
