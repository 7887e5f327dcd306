"""`python -m heterojob_console.rules [--window-s 60]`: the console's Prometheus recording rule file on stdout
(`devices.recording_rules`), to add to each Prometheus's `rule_files` (or a PrometheusRule's spec) on a national
fleet: the Devices tiles and the fleet's heat map then read one recorded series per node."""

from __future__ import annotations

import argparse
import sys

import yaml

from heterojob_console import devices


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window-s", type=int, default=devices.Reader.WINDOW_S,
                        help="the operator's --telemetry-window (default 60)")
    args = parser.parse_args(argv)
    sys.stdout.write(yaml.safe_dump(devices.recording_rules(args.window_s), sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
