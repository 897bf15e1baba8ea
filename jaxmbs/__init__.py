"""jaxmbs: constrained multibody dynamics as pure, differentiable JAX programs.

float64 is not switched on by importing jaxmbs; for accuracy work enable it first:

    import jax
    jax.config.update("jax_enable_x64", True)
"""

from .analysis import GroupSolvability as GroupSolvability
from .analysis import Linearization as Linearization
from .analysis import Reactions as Reactions
from .analysis import RowElimination as RowElimination
from .analysis import Solvability as Solvability
from .analysis import analyze_solvability as analyze_solvability
from .analysis import animate as animate
from .analysis import conserves_energy as conserves_energy
from .analysis import constraint_reactions as constraint_reactions
from .analysis import element_forces as element_forces
from .analysis import element_power as element_power
from .analysis import element_work as element_work
from .analysis import eliminate_rows as eliminate_rows
from .analysis import energy_rate as energy_rate
from .analysis import equilibrium as equilibrium
from .analysis import equilibrium_multipliers as equilibrium_multipliers
from .analysis import linearize as linearize
from .analysis import monte_carlo_to_xarray as monte_carlo_to_xarray
from .analysis import physical_reactions as physical_reactions
from .analysis import snapshot as snapshot
from .analysis import solution_reactions as solution_reactions
from .analysis import to_xarray as to_xarray
from .analysis import write_csv as write_csv
from .batch import MonteCarloResult as MonteCarloResult
from .batch import lapack_free as lapack_free
from .batch import monte_carlo as monte_carlo
from .batch import process_share as process_share
from .batch import summarize as summarize
from .formulations import KKT as KKT
from .formulations import METHODS as METHODS
from .formulations import AbstractFactorizedFormulation as AbstractFactorizedFormulation
from .formulations import AbstractFormulation as AbstractFormulation
from .formulations import ClosingTerms as ClosingTerms
from .formulations import ClosingVariant as ClosingVariant
from .formulations import CoordinatePartitioning as CoordinatePartitioning
from .formulations import NullSpaceFormulation as NullSpaceFormulation
from .formulations import WangHuston as WangHuston
from .formulations import closing_terms as closing_terms
from .formulations import minimal_equations as minimal_equations
from .formulations import nullspace as nullspace
from .integrate import RESULTS as RESULTS
from .integrate import AbstractStabilization as AbstractStabilization
from .integrate import AbstractStateSpace as AbstractStateSpace
from .integrate import AllCoordinates as AllCoordinates
from .integrate import Baumgarte as Baumgarte
from .integrate import ClosingConditions as ClosingConditions
from .integrate import DiscreteAdjoint as DiscreteAdjoint
from .integrate import GeneralizedAlpha as GeneralizedAlpha
from .integrate import NoStabilization as NoStabilization
from .integrate import PartitionedCoordinates as PartitionedCoordinates
from .integrate import Projection as Projection
from .integrate import SimulationError as SimulationError
from .integrate import Solution as Solution
from .integrate import Switching as Switching
from .integrate import accelerations as accelerations
from .integrate import accelerations_and_multipliers as accelerations_and_multipliers
from .integrate import project_positions as project_positions
from .integrate import project_velocities as project_velocities
from .integrate import simulate as simulate
from .integrate import simulate_closing as simulate_closing
from .integrate import simulate_partitioned as simulate_partitioned
from .kinematics import Structure as Structure
from .kinematics import acceleration_rhs as acceleration_rhs
from .kinematics import analyze_structure as analyze_structure
from .kinematics import assemble as assemble
from .kinematics import consistent_state as consistent_state
from .kinematics import constraint_jacobian as constraint_jacobian
from .kinematics import independent_coordinates as independent_coordinates
from .kinematics import partition_criterion as partition_criterion
from .kinematics import position_residual as position_residual
from .kinematics import projective_criterion as projective_criterion
from .kinematics import svd_criterion as svd_criterion
from .kinematics import velocity_residual as velocity_residual
from .model import Mechanism as Mechanism
from .model import Profile as Profile
from .model import joints as joints
from .model import map_coordinates as map_coordinates
from .optimize import GRADIENT_MODES as GRADIENT_MODES
from .optimize import OptimizationResult as OptimizationResult
from .optimize import central_difference_gradient as central_difference_gradient
from .optimize import optimize as optimize
from .optimize import trajectory_loss as trajectory_loss

__version__ = "0.1.0"
