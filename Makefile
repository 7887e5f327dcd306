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
	scripts/run python3 bench/admission.py
	scripts/run python3 bench/telemetry.py
	scripts/run python3 bench/placement.py
	scripts/run python3 bench/recovery.py
	scripts/run python3 bench/alerts.py
	scripts/run python3 bench/console.py
	scripts/run python3 bench/efficiency.py
	scripts/run python3 bench/chaos.py
