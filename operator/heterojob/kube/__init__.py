"""Actuation: the Kubernetes side of the operator (API calls, object conversion, manifests)."""
