"""Who holds room and who may be disturbed for whom: holders, victims, preemption, the pool."""
