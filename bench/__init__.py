"""The benchmarks, each run as a module from the repository root: `python3 -m bench.NAME`; each prints one JSON
object as its last line."""
