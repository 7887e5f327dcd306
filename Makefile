.PHONY: test generate check-crds bench

test:
	python3 -m pytest -q

generate:
	heterojob generate

# Fails when crds/ or manifests/defaults/ drift from the code.
check-crds:
	heterojob generate --check

bench:
	python3 bench/admission.py
	python3 bench/telemetry.py
	python3 bench/placement.py
	python3 bench/recovery.py
	python3 bench/alerts.py
	python3 bench/console.py
	python3 bench/efficiency.py
	python3 bench/chaos.py
