"""Kinematics: the constraint Jacobian C and Γ (the one place they come from), sparsity,
the static structure (rank, redundancy, analysed outside jit), assembly of consistent
initial conditions, and the projective criterion for independent coordinates."""

from .assembly import assemble as assemble
from .assembly import consistent_state as consistent_state
from .compressed import CompressedJacobian as CompressedJacobian
from .constraints import acceleration_rhs as acceleration_rhs
from .constraints import constraint_jacobian as constraint_jacobian
from .constraints import constraint_residuals as constraint_residuals
from .constraints import position_residual as position_residual
from .constraints import residuals_and_gamma as residuals_and_gamma
from .constraints import stored_constraint_jacobian as stored_constraint_jacobian
from .constraints import velocity_residual as velocity_residual
from .criteria import independent_coordinates as independent_coordinates
from .criteria import partition_criterion as partition_criterion
from .criteria import projective_criterion as projective_criterion
from .criteria import svd_criterion as svd_criterion
from .sparsity import Sparsity as Sparsity
from .structure import Structure as Structure
from .structure import analyze_structure as analyze_structure
from .structure import resolve_structure as resolve_structure
