"""Placement of one waiting job (filters and scorers), why a node refuses, spec checks against the fleet, hardware discovery."""
