"""Pure decisions: no Kubernetes, Kopf, Prometheus or clock. Time and data are arguments."""
