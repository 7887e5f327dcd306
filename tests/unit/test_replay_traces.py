"""Reading Gavel-format traces for `heterojob sim replay`: both of Gavel's layouts, and the edge cases of real
and hand-made traces (a clear error naming the line and field, or a documented handling).

Layouts (stanford-futuredata/gavel, commit c4fa400): the Philly-derived traces in scheduler/traces/msr/ have 7
fields with the arrival before the scale factor; what scheduler/utils.py `parse_trace` reads (and
scripts/utils/generate_trace.py writes, e.g. scheduler/traces/physical_cluster/) has 10, with the scale
factor, priority weight and SLO before the arrival.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from heterojob.replay.traces import MAX_HOURS, TraceError, load_trace, read_trace

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "data" / "gavel" / "isolated_throughputs.csv"
TEN = ROOT / "tests" / "fixtures" / "traces" / "gavel-parse-trace-10-fields.trace"
R18 = "ResNet-18 (batch size 64)"


def seven(job_type: str = R18, steps: object = 1000, arrival: object = 0, gpus: object = 1) -> str:
    return "\t".join(map(str, (job_type, "python3 main.py", "--num_steps", 1, steps, arrival, gpus)))


def ten(job_type: str = R18, steps: object = 1000, gpus: object = 1, weight: object = 1, slo: object = "-1.000000",
        arrival: object = 0) -> str:
    return "\t".join(map(str, (job_type, "python3 main.py", "image_classification/cifar10", "--num_steps", 1, steps,
                               gpus, weight, slo, arrival)))


def write(tmp_path: Path, *lines: str, end: str = "\n") -> Path:
    path = tmp_path / "t.trace"
    path.write_text("".join(line + end for line in lines))
    return path


def test_the_ten_field_layout_of_gavels_parse_trace_is_read_field_by_field() -> None:
    trace = read_trace(TEN, TABLE)
    jobs = {j.job_type: j for j in trace.jobs}
    # before: the 10-field layout was read as the 7-field one: total_steps = needs_data_dir (1 step), the
    # arrival = total_steps, silently
    r50 = jobs["ResNet-50 (batch size 64)"]
    assert (r50.total_steps, r50.arrival_s, r50.gpus) == (2931, 0, 1)
    assert (jobs["Transformer (batch size 16)"].total_steps, jobs["Transformer (batch size 16)"].gpus) == (11005, 2)
    assert jobs["LM (batch size 10)"].arrival_s == 1200 and jobs["ResNet-18 (batch size 128)"].gpus == 4
    # priority weights 1 and 5 become priority levels 0 and 1
    assert trace.priority_weights == (1.0, 5.0)
    assert jobs["Recommendation (batch size 8192)"].priority == 1 and r50.priority == 0
    assert len(trace.jobs) == 6 and trace.left_out() == ""


def test_the_seven_field_philly_layout_is_unchanged() -> None:
    jobs = load_trace(ROOT / "data" / "gavel" / "philly-925e2b.trace", TABLE)
    assert len(jobs) == 4 and all(j.priority == 0 for j in jobs)
    first = (ROOT / "data" / "gavel" / "philly-925e2b.trace").read_text().splitlines()[0].split("\t")
    assert (jobs[0].total_steps, jobs[0].arrival_s, jobs[0].gpus) == (float(first[4]), float(first[5]), int(first[6]))


def test_blank_lines_comments_crlf_and_trailing_tabs_are_skipped(tmp_path: Path) -> None:
    path = write(tmp_path, "# a comment", "", seven(arrival=5), "   ", ten(arrival=7, gpus=2) + "\t", end="\r\n")
    jobs = load_trace(path, TABLE)
    assert [(j.arrival_s, j.gpus) for j in jobs] == [(5, 1), (7, 2)]
    assert [j.id for j in jobs] == [2, 4]  # ids are the line's index in the file


def test_a_job_type_not_in_the_table_is_left_out_and_named(tmp_path: Path) -> None:
    trace = read_trace(write(tmp_path, seven("GPT-3 (batch size 2048)"), seven(), seven("GPT-3 (batch size 2048)")),
                       TABLE)
    assert len(trace.jobs) == 1
    assert trace.unknown_types == {"GPT-3 (batch size 2048)": 2}
    assert "2 jobs of types not in the throughput table: 'GPT-3 (batch size 2048)' (2)" in trace.left_out()


def test_scale_factors_past_gavels_measurements(tmp_path: Path) -> None:
    """Philly traces hold 7-, 12-, 16-, 24-, 32- and 64-device jobs; Gavel measured 1, 2, 4, 8: flat beyond 8."""
    jobs = load_trace(write(tmp_path, seven(gpus=8), seven(gpus=16), seven("A3C", gpus=16), seven(gpus=7)), TABLE)
    by = {(j.job_type, j.gpus): j for j in jobs}
    assert by[(R18, 16)].rate("nvidia-h100") == by[(R18, 8)].rate("nvidia-h100") > 0
    assert by[("A3C", 16)].classes  # measured at 1 device only: runs at that rate
    assert by[(R18, 16)].shape == (2, 8) and by[(R18, 7)].shape == (1, 7)


@pytest.mark.parametrize(("line", "field"), [
    (seven(steps="many"), "total_steps 'many' is not a number"),
    (seven(steps=0), "total_steps '0' must be positive"),
    (seven(steps="nan"), "total_steps 'nan' is not a finite number"),
    (seven(arrival=-3), "arrival_time '-3' must not be negative"),
    (seven(gpus="1.5"), "scale_factor '1.5' is not a whole number"),
    (seven(gpus=0), "scale_factor '0' must be positive"),
    (ten(weight="high"), "priority_weight 'high' is not a number"),
    (ten(slo="soon"), "SLO 'soon' is not a number"),
    (seven(job_type=" "), "job_type is empty"),
    (seven().replace("\t", " "), "1 tab-separated fields; a Gavel trace line has 7"),
    ("\t".join(["x"] * 8), "8 tab-separated fields"),
])
def test_a_bad_line_is_an_error_naming_the_line_and_the_field(tmp_path: Path, line: str, field: str) -> None:
    with pytest.raises(TraceError) as err:
        read_trace(write(tmp_path, seven(), line), TABLE)
    assert "t.trace, line 2" in str(err.value) and field in str(err.value)


def test_a_huge_duration_or_arrival_is_refused_naming_the_line(tmp_path: Path) -> None:
    fine = load_trace(write(tmp_path, seven(steps=4e8)), TABLE)  # Gavel's longest Philly job: ~4e8 steps
    assert fine[0].total_steps == 4e8
    with pytest.raises(TraceError, match=r"t.trace, line 2: total_steps 1e\+13 is .* hours") as err:
        read_trace(write(tmp_path, seven(), seven(steps=1e13)), TABLE)
    assert f"{MAX_HOURS:g}" in str(err.value)
    # an arrival 10^13 s in: the replay ran the fleet's failures over 3 x 10^9 hours (18 s per policy; 10^15: 30 min)
    with pytest.raises(TraceError, match=r"t.trace, line 2: arrival_time 1e\+13 is past 1e\+06 hours"):
        read_trace(write(tmp_path, seven(), seven(arrival=1e13)), TABLE)


def test_a_throughput_table_without_a_column_is_named(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_text("job_type,scale_factor,k80_steps_per_s,v100_steps_per_s\nA3C,1,1,2\n")
    with pytest.raises(TraceError, match="no column p100_steps_per_s"):
        read_trace(write(tmp_path, seven("A3C")), table)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "heterojob", "sim", "replay", *args], capture_output=True, text=True,
                          timeout=120)


def test_the_cli_replays_the_ten_field_layout_and_says_what_it_left_out(tmp_path: Path) -> None:
    out = run("--trace", str(TEN), "--policy", "both")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["static"]["avg_jct_h"] > 0 and result["heterojob"]["avg_jct_h"] > 0
    mixed = write(tmp_path, seven(), seven("Unknown model"), seven(gpus=64))
    out = run("--trace", str(mixed), "--policy", "static", "--arrival-scale", "0.5")
    assert out.returncode == 0, out.stderr
    left = json.loads(out.stdout)["left_out"]
    assert "1 jobs of types not in the throughput table: 'Unknown model' (1)" in left
    assert "1 jobs larger than one class in one region" in left


def test_the_cli_refuses_a_bad_or_empty_trace_in_one_line(tmp_path: Path) -> None:
    out = run("--trace", str(write(tmp_path, seven(), seven(steps="x"))))
    assert out.returncode == 2 and "t.trace, line 2: total_steps 'x' is not a number" in out.stderr
    assert "Traceback" not in out.stderr
    empty = tmp_path / "empty.trace"
    empty.write_text("# nothing\n\n")
    out = run("--trace", str(empty))
    assert out.returncode == 2 and "the trace is empty" in out.stderr
    unknown = run("--trace", str(write(tmp_path, seven("Unknown model"))))
    assert unknown.returncode == 2 and "'Unknown model'" in unknown.stderr


def test_gavels_own_throughput_json_is_read_like_the_csv(tmp_path: Path) -> None:
    """scheduler/simulation_throughputs.json: worker type -> "('job type', scale)" -> {"null": alone, co-located...};
    the vendored CSV is its flattening (equal on all 26 types x 4 scales, checked at Gavel c4fa400)."""
    data = {w: {"('A3C', 1)": {"null": rate, "('A3C', 1)": [rate / 2, rate / 2]},
                "('Transformer (batch size 16)', 2)": {"null": rate * 3}}
            for w, rate in (("k80", 1.0), ("p100", 2.0), ("v100", 4.0))}
    table = tmp_path / "simulation_throughputs.json"
    table.write_text(json.dumps(data))
    jobs = load_trace(write(tmp_path, seven("A3C"), seven("Transformer (batch size 16)", gpus=2)), table)
    assert [j.rate("nvidia-h100") for j in jobs] == [4.0, 12.0] and jobs[0].rate("ascend-910b") == 1.0
    table.write_text(json.dumps({"k80": {}, "v100": {}}))
    with pytest.raises(TraceError, match="no worker type p100"):
        read_trace(write(tmp_path, seven("A3C")), table)
    table.write_text(json.dumps({w: {"A3C-1": {"null": 1}} for w in ("k80", "p100", "v100")}))
    with pytest.raises(TraceError, match=r"v100\['A3C-1'\] is not \('job type', scale\)"):
        read_trace(write(tmp_path, seven("A3C")), table)
