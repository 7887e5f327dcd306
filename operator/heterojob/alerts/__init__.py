"""Alertmanager webhook intake: payload validation, mapping alerts to jobs and actions, the HTTP receiver."""
