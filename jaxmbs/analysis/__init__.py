"""Analysis of a mechanism and its motion: static equilibrium, linearisation, constraint
reactions, force-element forces, solvability of the reactions with redundant constraints,
elimination of redundant rows."""

from .elements import element_forces as element_forces
from .elements import element_power as element_power
from .elimination import RowElimination as RowElimination
from .elimination import eliminate_rows as eliminate_rows
from .equilibrium import equilibrium as equilibrium
from .equilibrium import equilibrium_multipliers as equilibrium_multipliers
from .linearization import Linearization as Linearization
from .linearization import linearize as linearize
from .reactions import Reactions as Reactions
from .reactions import constraint_reactions as constraint_reactions
from .reactions import physical_reactions as physical_reactions
from .reactions import solution_reactions as solution_reactions
from .solvability import Analysis as Analysis
from .solvability import GroupSolvability as GroupSolvability
from .solvability import analyze as analyze
