"""Our own search space: sketch rules per target; a sketch + decisions -> a schedule.

Public surface: `generate_space(task, target)`, `SearchSpace`, `Candidate`,
`InvalidCandidate`, `SPACE_VERSION`.
"""
from .candidate import Candidate
from .decisions import Decider, InvalidCandidate
from .space import SPACE_VERSION, SearchSpace, generate_space

__all__ = ["Candidate", "Decider", "InvalidCandidate", "SearchSpace", "generate_space",
           "SPACE_VERSION"]
