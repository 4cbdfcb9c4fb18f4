"""ATIF export and import: the Agent Trajectory Interchange Format of Terminal-Bench and Harbor
(written as v1.7; any v1.x read).

Mapping. An ATIF step is a system, user or agent message; the observation of an
agent's tool calls rides on the same ATIF step. In the ALE schema the
observation is a ``tool`` step of its own. So an assistant step and the tool step
after it become one ATIF agent step with ``observation``; an ATIF step's
observation becomes a tool step after it. ALE fields ATIF has no place for
(rewards, verifier, timings, failure mode, policy versions, ids) travel in the
``extra.ale`` object of the ATIF document and of its steps.

Losslessness, both ways:

* ALE -> ATIF -> ALE gives back an equal trajectory.
* ATIF -> ALE -> ATIF gives back the same JSON. Whatever of the ATIF document
  the canonical mapping would not reproduce (field order aside) - an unusual
  ``step_id``, a multimodal message, fields of a newer ATIF version - is kept as
  a JSON patch in the trajectory's ``extra["atif"]`` and applied again on export.
"""

from ale.atif.export import to_atif, write_atif
from ale.atif.models import (
    ATIF_VERSION,
    AtifAgent,
    AtifError,
    AtifFinalMetrics,
    AtifMetrics,
    AtifObservation,
    AtifObservationResult,
    AtifStep,
    AtifSubagentRef,
    AtifToolCall,
    AtifTrajectory,
)
from ale.atif.parse import from_atif, read_atif

__all__ = [
    "ATIF_VERSION",
    "AtifAgent",
    "AtifError",
    "AtifFinalMetrics",
    "AtifMetrics",
    "AtifObservation",
    "AtifObservationResult",
    "AtifStep",
    "AtifSubagentRef",
    "AtifToolCall",
    "AtifTrajectory",
    "from_atif",
    "read_atif",
    "to_atif",
    "write_atif",
]
