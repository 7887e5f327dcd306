"""Both policies on the same trace, fleet and seed: static (FIFO, user's device type, Kubernetes' failure
path) against heterojob (the engine's placement, restart off the failed node at once).

Trace: data/gavel/philly-ee9e8c.trace (2,000 Philly jobs; those too large for one class in one region of
this fleet are left out, for both policies). Fleet: 2 nodes x 8 devices per class per region, 3 classes,
3 regions (144 devices); arrivals compressed to 0.1 of the trace's times; a device MTBF of 50,000 h.

Last line: one JSON object. Targets (issue 10): heterojob utilization >= 0.92, jct_reduction >= 0.37,
work lost per failure <= one checkpoint interval, wall_s <= 60; same seed, same numbers.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from heterojob.sim.replay import Config, load_trace, replay  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "gavel"


def main() -> int:
    started = time.perf_counter()
    config = Config(nodes_per_class_region=2, arrival_scale=0.1, seed=1)
    jobs = [j for j in load_trace(DATA / "philly-ee9e8c.trace", DATA / "isolated_throughputs.csv", seed=1)
            if j.gpus <= config.nodes_per_class_region * config.devices_per_node]
    static, ours = replay(jobs, "static", config), replay(jobs, "heterojob", config)
    interval = config.checkpoint_s + config.save_s
    result = {
        "trace": f"philly-ee9e8c ({len(jobs)} jobs)",
        "static": static.summary(), "heterojob": ours.summary(),
        "utilization_gain_pts": round(100 * (ours.utilization - static.utilization), 1),
        "jct_reduction": round(1 - ours.avg_jct_h / static.avg_jct_h, 3) if static.avg_jct_h else 0.0,
        "checkpoint_interval_s": interval,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    result["meets_targets"] = (ours.utilization >= 0.92 and result["jct_reduction"] >= 0.37
                               and ours.max_lost_per_failure_s <= interval and result["wall_s"] <= 60)
    print(json.dumps(result))
    return 0 if result["meets_targets"] else 1


if __name__ == "__main__":
    sys.exit(main())
