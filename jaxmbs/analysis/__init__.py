"""Analysis of a mechanism and its motion: constraint reactions, force-element forces,
solvability of the reactions with redundant constraints, elimination of redundant rows."""

from .elements import element_forces as element_forces
from .elements import element_power as element_power
from .elimination import RowElimination as RowElimination
from .elimination import eliminate_rows as eliminate_rows
from .reactions import Reactions as Reactions
from .reactions import constraint_reactions as constraint_reactions
from .reactions import physical_reactions as physical_reactions
from .reactions import solution_reactions as solution_reactions
from .solvability import Analysis as Analysis
from .solvability import GroupSolvability as GroupSolvability
from .solvability import analyze as analyze
