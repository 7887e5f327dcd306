"""Fleet telemetry: exporter adapters into one canonical device model (see shared/reference/telemetry.md)."""
