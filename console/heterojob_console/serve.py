"""`python -m heterojob_console.serve [streamlit run flags]`: Streamlit's own `streamlit run Home.py`, with the
console's modules (pandas, plotly, the operator's telemetry and planner code, the basemap) loaded before
the server starts, so the first visitor does not wait for them (about 1.5 s on a quiet machine), and the
first read of the cluster and of Prometheus already under way (`ui.prefetch`)."""

from __future__ import annotations

import sys
from importlib.resources import files


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
    sys.argv = ["streamlit", "run", str(files("heterojob_console") / "Home.py"), *sys.argv[1:]]
    cli.main()


if __name__ == "__main__":
    main()
