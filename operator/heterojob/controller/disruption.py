"""Kept for one import only: controller/scheduler.py takes `MIGRATE` (the `status.handled` kind of a manual move,
`state.running.MIGRATE`) from here. The disruption step itself is `controller/moves.py` (`Moves`). This module goes
when the scheduler imports `MIGRATE` from `heterojob.state.running`."""

from heterojob.state.running import MIGRATE as MIGRATE
