"""The side-by-side with MLflow and Phoenix (``history_app/benchmarks/rivals.py``): its
table, ratios and polling, without the rivals' packages (their environments are made only
when the benchmark runs)."""

import sys

from history_app.benchmarks import otlp, rivals


def rows(ours_rate: float, mlflow_rate: float, phoenix_rate: float, lost: int = 0) -> list[dict]:
    runs = 400
    return [
        rivals.result(
            "ours (SQLite, -w 2)", runs, 6400, 6400 - lost, runs / ours_rate, 400 * 38 * 1024, "load 1"
        ),
        rivals.result("MLflow 3.17.2", runs, 6400, 6400, runs / mlflow_rate, 400 * 83 * 1024, "load 2"),
        rivals.result("Phoenix 20.26.1", runs, 6400, 6000, runs / phoenix_rate, 400 * 46 * 1024, "load 3"),
    ]


def test_the_table_gives_each_tool_its_rate_losses_disk_and_the_ratios_against_the_goals():
    text = rivals.table(rows(200.0, 70.0, 6.0))
    lines = text.splitlines()
    assert "traces/s" in lines[0] and "KB/trace" in lines[0]
    ours, mlflow, phoenix = lines[1:4]
    assert ours.split()[:4] == ["ours", "(SQLite,", "-w", "2)"] and " 200.0 " in ours and " 38.0 " in ours
    assert "6000/6400" in phoenix and " 400 " in phoenix  # 400 spans lost
    assert " 70.0 " in mlflow and " 83.0 " in mlflow
    assert "ours / MLflow       2.9x  (goal >= 3x with 0 spans lost: NOT met)" in lines[4]
    assert lines[5] == (
        "  ours / Phoenix     33.3x  (goal >= 30x with 0 spans lost: met; "
        "Phoenix stored only 6000 of 6400 spans: its time is until it stalled)"
    )


def test_unique_span_ids_differ_across_traces_and_keep_each_trace_s_tree():
    from history_app.benchmarks import shape

    base = [shape.run_dict(i, model_calls=True) for i in range(3)]
    plain = otlp.otlp_json(base, "0badcafe", 0)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    unique = otlp.otlp_json(base, "0badcafe", 0, unique_span_ids=True)["resourceSpans"][0]["scopeSpans"][0][
        "spans"
    ]
    assert len({s["spanId"] for s in plain}) == otlp.SPANS_PER_RUN  # the same ids in every trace
    assert len({s["spanId"] for s in unique}) == 3 * otlp.SPANS_PER_RUN
    for trace in {s["traceId"] for s in unique}:
        spans = [s for s in unique if s["traceId"] == trace]
        (root,) = [s for s in spans if not s["parentSpanId"]]
        assert all(s["parentSpanId"] == root["spanId"] for s in spans if s is not root)
    assert [(s["name"], s["attributes"]) for s in plain] == [(s["name"], s["attributes"]) for s in unique]


def test_a_goal_is_not_met_when_ours_lost_a_span_however_fast():
    text = rivals.table(rows(1000.0, 70.0, 6.0, lost=1))
    assert text.count("NOT met") == 2


def test_the_summary_is_the_median_ratio_of_the_rounds():
    text = rivals.summary([rows(200.0, 70.0, 6.0), rows(300.0, 70.0, 6.0), rows(100.0, 70.0, 5.0)])
    assert "ours / MLflow, median of 3: 2.9x [1.4-4.3] (goal >= 3x)" in text
    assert "ours / Phoenix, median of 3: 33.3x [20.0-50.0] (goal >= 30x)" in text


def test_waiting_stops_at_the_target_or_when_the_count_stalls():
    counts = iter([0, 5, 10, 16])
    assert rivals.wait_for(lambda: next(counts), 16, stall=5)[0] == 16
    assert rivals.wait_for(lambda: 3, 16, stall=0.3)[0] == 3


def test_the_flag_is_parsed_and_the_rivals_are_not_imported(monkeypatch, capsys):
    called = []
    monkeypatch.setattr(rivals, "compare", lambda args: called.append((args.rivals, args.runs, args.stall)))
    monkeypatch.setattr(sys, "argv", ["otlp", "--rivals", "--runs", "40"])
    otlp.main()
    assert called == [(True, 40, 180.0)]
    assert "mlflow" not in sys.modules and "phoenix" not in sys.modules


def test_the_pins_are_exact_and_the_environment_is_named_by_them():
    for name in rivals.RIVALS:
        pins = [
            line for line in rivals.requirements(name).read_text().splitlines() if line and line[0] != "#"
        ]
        assert pins and all("==" in line for line in pins)
    one = rivals.environment_dir("mlflow", b"mlflow==3.17.2\n")
    assert one == rivals.environment_dir("mlflow", b"mlflow==3.17.2\n")
    assert one != rivals.environment_dir("mlflow", b"mlflow==3.18.0\n")
    assert one.parent == rivals.CACHE and one.name.startswith("rivals-mlflow-")
