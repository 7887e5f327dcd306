"""bench/scale.py's reading of the cycle-CPU histogram between two scrapes: the p95's bucket and each bucket's
share, over the measured phase only (what came before the first reading is not counted)."""

from bench.scale import histogram_quantile, histogram_shares

INF = float("inf")


def test_the_shares_and_the_quantile_count_only_the_cycles_between_the_readings() -> None:
    first = {0.25: 5.0, 0.5: 5.0, 1.0: 10.0, INF: 10.0}  # before: 5 fast cycles, 5 slow ones
    last = {0.25: 15.0, 0.5: 23.0, 1.0: 29.0, INF: 30.0}  # between: 10 <= 0.25, 8 more <= 0.5, 1 more <= 1, 1 over
    assert histogram_shares(first, last) == {"0.25": 0.5, "0.5": 0.9, "1": 0.95}
    assert histogram_quantile(first, last, 0.95) == 1.0
    assert histogram_quantile(first, last, 0.9) == 0.5
    assert histogram_shares(first, first) == {}  # no cycle between: no share, not a division by zero


def test_the_collector_pauses_are_read_from_the_operators_own_metrics_between_the_readings() -> None:
    import gc

    from prometheus_client import generate_latest

    from bench.scale import gc_pauses
    from heterojob.metrics import OperatorMetrics

    metrics = OperatorMetrics()
    stop = metrics.watch_gc()
    try:
        gc.collect(0)
        first = generate_latest(metrics.registry).decode()
        gc.collect(2)
        gc.collect(2)
        metrics.gc_pause_seconds.labels("1").observe(0.3)  # a long pass, as a 100,000-device heap has
        last = generate_latest(metrics.registry).decode()
    finally:
        stop()
    stop()  # twice: no error
    out = gc_pauses(first, last)
    assert out["gc_full_passes"] == 2  # the two between the readings, not the one before
    assert out["gc_pauses_over_0_25_s"] >= 1
    assert gc_pauses(None, None) == {}  # an operator without the metric: nothing said, nothing made up
    gc.collect(2)
    assert gc_pauses(last, generate_latest(metrics.registry).decode())["gc_full_passes"] == 0  # stopped: unseen


def test_a_collector_pass_during_a_scrape_does_not_wait_for_the_scrapes_lock() -> None:
    """A scrape holds the histogram's lock while it allocates; a pass that allocation starts runs the callback on
    the same thread: it must not take that lock (it would wait for ever)."""
    import gc
    import threading

    from heterojob.metrics import OperatorMetrics

    metrics = OperatorMetrics()
    stop = metrics.watch_gc()
    done = threading.Event()

    def collect_holding_the_lock() -> None:
        with metrics.gc_pause_seconds._lock:  # what generate_latest holds while it copies the children
            gc.collect(0)
        done.set()

    worker = threading.Thread(target=collect_holding_the_lock, daemon=True)
    try:
        worker.start()
        assert done.wait(10), "the collector's callback waited for the scrape's lock"
    finally:
        stop()
