"""`python -m heterojob_console.serve [streamlit run flags]`: Streamlit's own `streamlit run Home.py`, with the
console's modules (pandas, plotly, the operator's telemetry and planner code, the basemap) loaded before
the server starts, so the first visitor does not wait for them (about 1.5 s on a quiet machine), and the
first read of the cluster and of Prometheus already under way (`ui.prefetch`). The server starts once the
first snapshot is made (or READY_WAIT_S passed), as a controller serves once its informers have synced: its
health check, the Deployment's readiness probe, answers when a page can be shown at once (at 100,000 devices the
first paged listing takes seconds)."""

from __future__ import annotations

import sys
from importlib.resources import files

# Streamlit runs a full garbage collection (`gc.collect(2)`) after every script run, each page visit and each
# live fragment's rerun every 5 s: it walks every object of the process, at 100,000 devices the snapshot's and the
# caches' millions, about half of a visit's CPU. Python's own generational collection still runs.
STREAMLIT_OPTIONS = ["--runner.postScriptGC", "false"]
READY_WAIT_S = 40.0  # at most; the liveness probe (manifests/base/console.yaml) gives 15 s + 3 x 20 s


def main() -> None:
    from heterojob_console import ui

    ui.prefetch()  # first: the reads overlap with the imports and the server's start below
    import heterojob_console.figures
    import heterojob_console.kpis
    import heterojob_console.preview
    import heterojob_console.quotas
    import heterojob_console.svg  # noqa: F401 - loaded for the pages' scripts
    from heterojob_console import basemap
    from streamlit.web import cli

    basemap.outlines((-180.0, 180.0), (-90.0, 90.0))
    ui.ready(READY_WAIT_S)  # the caches listed before the server answers (its health check is the readiness probe)
    sys.argv = ["streamlit", "run", str(files("heterojob_console") / "Home.py"), *STREAMLIT_OPTIONS, *sys.argv[1:]]
    cli.main()


if __name__ == "__main__":
    main()
