"""The ranks' own save time (issue 33 item 7): `checkpoint.last.saveSeconds` fed the transfer model with the
operator's downtime (24.8 s recorded for ranks that saved in 15 s while the operator restarted). Acks may say
when each rank began and finished saving; the operator records that, and reads every older ack form alike."""

from __future__ import annotations

from heterojob.engine.basics.acks import Ack, SaveTime, parse_ack, recorded, save_time
from heterojob.engine.execution.lifecycle import Action, AskedCheckpoint, JobView, PodView, decide

T = 1_767_225_600.0  # unix seconds


def test_an_ack_may_say_when_the_rank_began_and_finished_saving_in_any_field_order() -> None:
    full = parse_ack(f"c1;700;s3://ckpt/j/c1/;size=1234;start={T:.3f};end={T + 15.25:.3f}", "c1")
    assert full == Ack(700, "s3://ckpt/j/c1/", 1234, "", T, T + 15.25)
    swapped = parse_ack(f"c1;700;s3://ckpt/j/c1/;end={T + 2};start={T};size=9", "c1")
    assert swapped is not None and (swapped.size_bytes, swapped.start, swapped.end) == (9, T, T + 2)
    assert parse_ack("c1;700;s3://b/a;b/;size=9", "c1") == Ack(700, "s3://b/a;b/", 9)  # ';' in a URI
    assert parse_ack("c1;700;s3://x/", "c1") == Ack(700, "s3://x/")  # the oldest form
    # a pair that does not make a save time is ignored, never the ack or its size
    for bad in (f"start={T + 5};end={T}", f"start={T}", "start=soon;end=later", f"start=nan;end={T}"):
        ack = parse_ack(f"c1;7;s3://x/;size=3;{bad}", "c1")
        assert ack is not None and ack.uri == "s3://x/" and ack.size_bytes == 3 and ack.start is ack.end is None
        assert "ignored" in ack.problem
    # a URI whose last segment only looks like a field (a '/' in it) stays whole
    assert parse_ack("c1;7;s3://x/end=a/b/", "c1") == Ack(7, "s3://x/end=a/b/")


def test_the_gang_saved_from_its_first_start_to_its_last_end_never_less_than_one_rank_alone() -> None:
    ranks = [Ack(1, "u", start=T, end=T + 10), Ack(1, "u", start=T + 1, end=T + 15)]
    assert save_time(ranks) == SaveTime(15.0, T, T + 15)
    skewed = [Ack(1, "u", start=T, end=T + 10), Ack(1, "u", start=T - 3, end=T + 2)]  # a clock behind
    assert save_time(skewed) == SaveTime(13.0, T - 3, T + 10)
    assert save_time([Ack(1, "u", start=T, end=T + 10), Ack(1, "u")]) is None  # a rank with an older SDK


def test_the_recorded_save_time_is_the_ranks_not_the_operators_observation() -> None:
    asked, saved = T, SaveTime(15.0, T + 0.5, T + 15.5)
    # the operator was down for 10 s after the ranks answered: it reads the acks at T + 25
    assert recorded(saved, asked, T + 25) == (15.0, T + 15.5)
    # without times (an older SDK) the observation stands in, as before
    assert recorded(None, asked, T + 25) == (25.0, T + 25)
    # what the ranks say is bounded by what the operator saw: a clock ahead cannot end after it read the ack
    assert recorded(SaveTime(40.0, T, T + 40), asked, T + 25) == (25.0, T + 25)


def test_a_checkpoint_done_carries_the_ranks_save_time() -> None:
    def job(*acks: str) -> JobView:
        pods = tuple(PodView(f"j-g1-{r}", r, 1, "Running", checkpoint_request="c1", checkpoint_ack=a)
                     for r, a in enumerate(acks))
        return JobView(phase=None, reason=None, generation=1, replicas=len(acks), restarts=0, backoff_limit=3,
                       pods=pods, checkpoint=AskedCheckpoint("c1", T + 600, "migrate"), now=T + 60)

    d = decide(job(f"c1;9;s3://c/;start={T + 1};end={T + 9}", f"c1;9;s3://c/;start={T + 2};end={T + 16}"))
    assert d.action == Action.CHECKPOINT_DONE and d.save == SaveTime(15.0, T + 1, T + 16)
    old = decide(job(f"c1;9;s3://c/;start={T + 1};end={T + 9}", "c1;9;s3://c/;size=5"))
    assert old.action == Action.CHECKPOINT_DONE and old.save is None
