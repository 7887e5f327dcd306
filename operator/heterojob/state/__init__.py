"""The snapshot layer (Kueue's cache): live views of the cluster and the ledger of what every job holds,
rebuilt from the jobs' statuses when the operator starts. Read by the planner's callers; no policy here."""
