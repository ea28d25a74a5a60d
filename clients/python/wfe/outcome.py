"""The outcome words every wfe callback answers with (docs/runtime.md, "Outcome words")."""
from __future__ import annotations

import enum


class Outcome(str, enum.Enum):
    """What wfe did with a callback.  None of them asks you to repeat the call."""

    ACCEPTED = "accepted"
    """The transition happened (for accept_task: run the task)."""
    DUPLICATE = "duplicate"
    """This attempt already reported this outcome (or was already accepted): treat as success."""
    CONFLICT = "conflict"
    """This attempt already reported a different outcome: log it."""
    STALE = "stale"
    """The attempt or fence is not the current one (timed out, retried): drop the work."""
    LATE = "late"
    """The run already has a terminal intent (cancelled, failed): drop the work."""
    INVALID_RESULT = "invalid_result"
    """complete_task only: the result broke the output schema; the attempt failed with result.schema."""
    UNKNOWN = "unknown"
    """No such run or stage."""
    BUFFERED = "buffered"
    """signal only: no stage waits for it yet; kept for the run's next wait on it."""

    @property
    def taken(self) -> bool:
        """True when wfe has this attempt's report (accepted now or before)."""
        return self in (Outcome.ACCEPTED, Outcome.DUPLICATE)

    @property
    def still_ours(self) -> bool:
        """For accept_task and heartbeat: True when the worker should (go on) run(ning) the task."""
        return self is Outcome.ACCEPTED

    def __str__(self) -> str:
        return self.value
