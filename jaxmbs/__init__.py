"""jaxmbs: constrained multibody dynamics as pure, differentiable JAX programs.

float64 is not switched on by importing jaxmbs; for accuracy work enable it first:

    import jax
    jax.config.update("jax_enable_x64", True)
"""

from . import joints as joints
from . import nullspace as nullspace
from .assembly import assemble as assemble
from .batch import MonteCarloResult as MonteCarloResult
from .batch import lapack_free as lapack_free
from .batch import monte_carlo as monte_carlo
from .batch import process_share as process_share
from .batch import summarize as summarize
from .closing import ClosingTerms as ClosingTerms
from .closing import ClosingVariant as ClosingVariant
from .closing import closing_terms as closing_terms
from .closing import minimal_equations as minimal_equations
from .closing import simulate_closing as simulate_closing
from .dynamics import accelerations as accelerations
from .dynamics import accelerations_and_multipliers as accelerations_and_multipliers
from .elimination import RowElimination as RowElimination
from .elimination import eliminate_rows as eliminate_rows
from .formulations import KKT as KKT
from .formulations import METHODS as METHODS
from .formulations import AbstractFactorizedFormulation as AbstractFactorizedFormulation
from .formulations import AbstractFormulation as AbstractFormulation
from .formulations import CoordinatePartitioning as CoordinatePartitioning
from .formulations import NullSpaceFormulation as NullSpaceFormulation
from .formulations import WangHuston as WangHuston
from .integrate import RESULTS as RESULTS
from .integrate import Solution as Solution
from .integrate import simulate as simulate
from .kinematics import acceleration_rhs as acceleration_rhs
from .kinematics import constraint_jacobian as constraint_jacobian
from .kinematics import position_residual as position_residual
from .kinematics import velocity_residual as velocity_residual
from .maps import map_coordinates as map_coordinates
from .mechanism import Mechanism as Mechanism
from .optimize import GRADIENT_MODES as GRADIENT_MODES
from .optimize import OptimizationResult as OptimizationResult
from .optimize import central_difference_gradient as central_difference_gradient
from .optimize import consistent_state as consistent_state
from .optimize import optimize as optimize
from .optimize import trajectory_loss as trajectory_loss
from .partitioning import independent_coordinates as independent_coordinates
from .partitioning import partition_criterion as partition_criterion
from .partitioning import projective_criterion as projective_criterion
from .partitioning import simulate_partitioned as simulate_partitioned
from .partitioning import svd_criterion as svd_criterion
from .reactions import Reactions as Reactions
from .reactions import constraint_reactions as constraint_reactions
from .reactions import physical_reactions as physical_reactions
from .reactions import solution_reactions as solution_reactions
from .solvability import Analysis as Analysis
from .solvability import GroupSolvability as GroupSolvability
from .solvability import analyze as analyze
from .stabilization import AbstractStabilization as AbstractStabilization
from .stabilization import Baumgarte as Baumgarte
from .stabilization import NoStabilization as NoStabilization
from .stabilization import Projection as Projection
from .stabilization import project_positions as project_positions
from .stabilization import project_velocities as project_velocities
from .structure import Structure as Structure
from .structure import analyze_structure as analyze_structure
from .switching import Switching as Switching

__version__ = "0.1.0"
