"""Fleet telemetry: exporter adapters into one canonical device model (see docs/telemetry.md)."""
