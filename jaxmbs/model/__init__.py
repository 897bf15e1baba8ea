"""The model: the `Mechanism` contract, joints and bodies that write its functions, and
coordinate maps (first stage of the pipeline model → kinematics → formulations → integrate →
analysis)."""

from . import inputs as inputs
from . import joints as joints
from .inputs import Profile as Profile
from .maps import map_coordinates as map_coordinates
from .mechanism import AbstractKineticCompletion as AbstractKineticCompletion
from .mechanism import KineticCompletion as KineticCompletion
from .mechanism import Mechanism as Mechanism
