.PHONY: test check generate check-crds bench

# Each runs in heterojob's environment (scripts/run: the active virtualenv, else .venv from scripts/install-deps).

test:
	scripts/run python3 -m pytest -q

# The fast checks CI runs before the tests (seconds): import layers, ruff, mypy.
check:
	scripts/run lint-imports
	scripts/run ruff check .
	scripts/run mypy

generate:
	scripts/run heterojob generate

# Fails when crds/ or manifests/defaults/ drift from the code.
check-crds:
	scripts/run heterojob generate --check

bench:
	scripts/run python3 -m bench.admission
	scripts/run python3 -m bench.telemetry
	scripts/run python3 -m bench.placement
	scripts/run python3 -m bench.recovery
	scripts/run python3 -m bench.alerts
	scripts/run python3 -m bench.console
	scripts/run python3 -m bench.efficiency
	scripts/run python3 -m bench.chaos
