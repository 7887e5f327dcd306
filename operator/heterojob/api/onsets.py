"""`status.symptoms`: when each symptom that must last before it moves a job began (overheat, straggler).

Kept in the job's status by the one module that judges them (`state.symptoms`, written through
`controller.status`), so an operator restart keeps each holding clock, and no other writer's condition
decides when a symptom began.
"""

from __future__ import annotations

from pydantic import Field

from heterojob.api.common import StatusModel


class SymptomOnsets(StatusModel):
    generation: int = Field(description="the placement generation these onsets are about (another: ignored)")
    overheat: str | None = Field(None, description="since when a device of the job is at or above "
                                                   "spec.policy.overheatCelsius (RFC 3339)")
    straggler: str | None = Field(None, description="since when a replica is below spec.policy.stragglerRatio "
                                                    "of its peers' median utilization (RFC 3339)")
