"""The queue policy (multi-level feedback queue or FIFO), speeds and completion estimates, the guide, and the admission plan over the whole waiting queue (the local level)."""
