"""`heterojob demo`: the whole system on one machine, on the embedded defaults, with no cluster; one module
per step: what it seeds (`fleet`), starting and stopping everything (`run`), breaking and healing the running
demo (`inject`)."""
