"""heterojob: run AI training jobs on heterogeneous accelerators across regions."""

__version__ = "0.1.0"
