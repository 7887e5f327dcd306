"""Simulated telemetry: dcgm-exporter and npu-exporter stand-ins, and the Debian Prometheus and
Alertmanager started on loopback to scrape them."""
