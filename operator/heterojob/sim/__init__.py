"""The simulated world: `cluster` (API emulator, nodes, kubelet, harness), `telemetry` (exporters,
Prometheus wiring) and `demo` (the product demo that runs them with the operator and the console)."""
