"""Progress bars on the console: tqdm's redraws, a line each after torchrun's tee, are shown
once every 10 s of the bar's own clock, first and last always; the node log keeps them all."""
from __future__ import annotations

import io

import pytest

from orchestrate.supervise.console_filter import ConsoleFilter
from orchestrate.supervise.progress_bars import BAR_EVERY_S, BarThrottle, Redraw, parse_redraw
from orchestrate.supervise.worker_lines import LAST_LINES, NodeOutput, OutputLine, WorkerLines

# Verbatim from a 2-node run of a script with tqdm 4.70.1 (torchrun's tee, then the log pump).
CAPTURED = ["epoch 0:   0%|          | 0/150 [00:00<?, ?it/s]",
            "epoch 0:   7%|▋         | 10/150 [00:01<00:14,  9.40it/s]",
            "epoch 1: 100%|██████████| 150/150 [00:15<00:00,  9.54it/s]"]


def redraw_text(desc: str, n: int, total: int, elapsed_s: int) -> str:
    """A line as tqdm's default meter draws it (the bar itself is not read)."""
    minutes, seconds = divmod(elapsed_s, 60)
    return f"{desc}: {100 * n // total:3d}%|#####     | {n}/{total} [{minutes:02d}:{seconds:02d}<00:05,  9.40it/s]"


def test_tqdms_meters_are_read_with_and_without_a_total():
    assert [parse_redraw(text) for text in CAPTURED] == [Redraw("epoch 0", 0, 150, 0), Redraw("epoch 0", 10, 150, 1),
                                                         Redraw("epoch 1", 150, 150, 15)]
    assert parse_redraw("val: 12it [00:01,  9.50it/s]") == Redraw("val", 12, None, 1)
    assert parse_redraw("  0%|          | 0/150 [00:00<?, ?it/s]") == Redraw("", 0, 150, 0)
    assert parse_redraw("train:  5%|▌ | 1.2k/24k [1:00:07<01:08, 2.30s/it, loss=0.3]") == Redraw(
        "train", 1200, 24000, 3607)
    assert parse_redraw("epoch 3: 1.20kimg [02:03, 3.1kimg/s]") == Redraw("epoch 3", 1200, None, 123)
    assert parse_redraw("epoch 10: 100%|██████████| 150/150 [00:15<00:00,  9.54it/s]").desc == "epoch 10"
    # tqdm pads a redraw shorter than the one before with spaces, to wipe it
    assert parse_redraw(CAPTURED[1] + "     ") == Redraw("epoch 0", 10, 150, 1)


@pytest.mark.parametrize("text", ["epoch 1 loss 0.5", "rank0 step 3/40", "step 5 [00:01, loss 0.3]",
                                  "accuracy 45%| of 150 [00:01<00:02]", ""])
def test_a_users_own_lines_are_no_redraws(text):
    assert parse_redraw(text) is None


def through(throttle: BarThrottle, texts: list[str], node: str = "node0", rank: int = 0) -> list[str]:
    return [shown for text in texts for shown in throttle.shown(node, rank, text, parse_redraw(text))]


def test_a_bar_shows_its_first_redraw_one_every_ten_seconds_of_its_clock_and_its_last_once():
    redraws = [redraw_text("epoch 0", n, 300, n * 10 // 94) for n in range(301)]  # 9.4 it/s
    redraws.append(redraws[-1].replace("9.40it/s", "9.38it/s"))  # tqdm's close draws the last state again
    shown = through(BarThrottle(), redraws)
    assert [parse_redraw(text).elapsed_s for text in shown] == [0, 10, 20, 30, 31]
    assert shown[0] == redraws[0] and shown[-1] == redraws[-2]
    assert shown[1] == redraws[94]  # the first at 10 s
    assert BAR_EVERY_S == 10


def test_a_bar_cut_short_shows_where_it_stopped_when_the_nodes_output_ends():
    throttle: BarThrottle[str] = BarThrottle()
    redraws = [redraw_text("train", n, 300, n // 10) for n in range(138)]
    assert through(throttle, redraws) == [redraws[0], redraws[100]]
    assert throttle.flush("node1") == []  # another node's output
    assert throttle.flush("node0") == [redraws[137]]
    assert throttle.flush("node0") == []


def test_nothing_is_shown_again_where_the_last_redraw_was_shown():
    throttle: BarThrottle[str] = BarThrottle()
    through(throttle, [redraw_text("train", 0, 10, 0), redraw_text("train", 10, 10, 1)])
    assert throttle.flush("node0") == []


def test_a_bar_that_starts_again_shows_at_once_after_where_the_last_one_stopped():
    throttle: BarThrottle[str] = BarThrottle()
    first = [redraw_text("val", n, 50, 0) for n in range(40)]  # left before its end (a break)
    again = [redraw_text("val", n, 50, 0) for n in range(2)]
    assert through(throttle, first + again) == [first[0], first[-1], again[0]]


def test_each_rank_and_each_bar_has_its_own_clock():
    throttle: BarThrottle[str] = BarThrottle()
    a, b = redraw_text("train", 1, 9, 0), redraw_text("eval", 1, 9, 0)
    assert through(throttle, [a, b]) == [a, b]
    assert through(throttle, [a], rank=1) == [a]
    assert through(throttle, [a], node="node1") == [a]
    assert through(throttle, [redraw_text("train", 2, 9, 1)]) == []


def test_a_rank_with_many_bars_forgets_the_oldest_showing_where_it_stopped():
    throttle: BarThrottle[str] = BarThrottle(bars_per_rank=2)
    first = [redraw_text("train", n, 9, 0) for n in range(3)]
    assert through(throttle, first) == [first[0]]
    second, third = redraw_text("eval", 0, 9, 0), redraw_text("test", 0, 9, 0)
    assert through(throttle, [second, third]) == [second, first[-1], third]
    assert len(throttle.bars) == 2


def console_texts(lines: list[OutputLine], end: str = "") -> list[str]:
    console = ConsoleFilter()
    shown = [s for line in lines for s in console.shown(line)] + (console.flush(end) if end else [])
    return [f"{s.node}/{s.global_rank}: {s.text}" for s in shown]


def test_the_console_drops_the_empty_line_of_a_bars_first_carriage_return_and_no_other():
    def line(text: str, rank: int = 0) -> OutputLine:
        return OutputLine(f"node{rank}", text, 0, rank)

    bar = redraw_text("train", 0, 9, 0)
    assert console_texts([line("hello"), line(""), line(bar)]) == ["node0/0: hello", f"node0/0: {bar}"]
    assert console_texts([line(""), line("after a blank line")]) == ["node0/0: ", "node0/0: after a blank line"]
    assert console_texts([line(""), line(""), line(bar)]) == ["node0/0: ", f"node0/0: {bar}"]  # the 2nd: the bar's
    assert console_texts([line(""), line("x", rank=1)], end="node0") == ["node1/1: x", "node0/0: "]
    later = redraw_text("train", 3, 9, 4)
    assert console_texts([line(bar), line(later)], end="node0") == [f"node0/0: {bar}", f"node0/0: {later}"]
    # a bar left with leave=False is wiped with spaces: not a line to show; a user's own spaces are
    wiped = " " * 60
    assert console_texts([line(bar), line(wiped), line("done"), line("   ")]) == [
        f"node0/0: {bar}", "node0/0: done", "node0/0:    "]


def test_a_bars_first_carriage_return_is_dropped_when_the_ranks_other_stream_prints_before_the_bar():
    # tqdm draws on stderr: "\r" then its bar, which torchrun's tee reads as an empty line, then the
    # bar's line once the next "\r" comes; the rank's own stdout lines may arrive in between
    def line(text: str, source: str, rank: int = 0) -> OutputLine:
        return OutputLine(f"node{rank}", text, 0, rank, source=source)

    bar = redraw_text("epoch 1", 0, 9, 0)
    assert console_texts([line("", "stderr"), line("[Gloo] Rank 0 is connected", "stdout"), line("loss 0.5", "stdout"),
                          line(bar, "stderr")]) == [
        "node0/0: [Gloo] Rank 0 is connected", "node0/0: loss 0.5", f"node0/0: {bar}"]
    # a user's own empty line on one stream still shows: before that stream's next line, or at the end
    assert console_texts([line("", "stderr"), line("on stdout", "stdout"), line("warned", "stderr")]) == [
        "node0/0: on stdout", "node0/0: ", "node0/0: warned"]
    assert console_texts([line("", "stderr"), line("on stdout", "stdout")], end="node0") == [
        "node0/0: on stdout", "node0/0: "]
    assert console_texts([line("", "stdout"), line("", "stderr"), line("next", "stdout")], end="node0") == [
        "node0/0: ", "node0/0: next", "node0/0: "]


def test_each_whole_worker_line_says_the_stream_it_came_on(make_job):
    worker_lines = WorkerLines(make_job(nodes=1, nproc_per_node=2).nodes[0])
    assert [(line.text, line.source) for line in worker_lines.feed("[0|0]:hello", "stdout")] == [("hello", "stdout")]
    # a piece left unfinished on stderr, while stdout goes on, is stderr's when its line ends or the output does
    assert worker_lines.feed("[1|1]:  0%|[0|0]:warned", "stderr")[0].source == "stderr"
    assert [(line.text, line.source) for line in worker_lines.feed("[0|0]:step 1", "stdout")] == [("step 1", "stdout")]
    assert [(line.text, line.source) for line in worker_lines.flush()] == [("  0%|", "stderr")]


def test_the_last_lines_of_a_rank_keep_one_redraw_of_a_bar_and_the_log_keeps_them_all(make_job):
    log = io.StringIO()
    output = NodeOutput(make_job(nodes=2).nodes[1], log)
    redraws = [redraw_text("train", n, 300, 0) for n in range(30)]
    other = redraw_text("eval", 1, 9, 0)
    lines = ["step 0", *redraws, other, "Traceback (most recent call last):", "FloatingPointError: NaN"]
    for text in lines:
        output.add(f"[1|0]:{text}", 0.0)
    assert output.last_lines(1) == ["step 0", redraws[-1], other, *lines[-2:]]
    assert log.getvalue().count("train:") == 30
    assert LAST_LINES < 30


def test_a_bar_whose_description_changes_at_each_step_is_one_bar():
    throttle: BarThrottle[str] = BarThrottle()
    redraws = [redraw_text(f"loss {1 / (n + 1):.3f}", n, 100, n // 5) for n in range(100)]
    assert [parse_redraw(text).elapsed_s for text in through(throttle, redraws)] == [0, 10]
    # set_description redraws at once, at the count before the step's update
    throttle = BarThrottle()
    redraws = [redraw_text(f"loss {1 / (n + step):.3f}", n, 100, n // 5) for n in range(100) for step in (1, 2)]
    assert [parse_redraw(text).elapsed_s for text in through(throttle, redraws)] == [0, 10]


def test_two_bars_at_once_whose_descriptions_differ_in_numbers_are_two_bars():
    throttle: BarThrottle[str] = BarThrottle()
    one = [redraw_text("model-00001-of-00002", n, 200, n // 10) for n in range(201)]
    two = [redraw_text("model-00002-of-00002", n, 100, n // 5) for n in range(101)]
    shown = through(throttle, [text for pair in zip(one, two) for text in pair] + one[101:])
    assert [(parse_redraw(text).desc[10], parse_redraw(text).elapsed_s) for text in shown] == [
        ("1", 0), ("2", 0), ("2", 10), ("1", 10), ("2", 20), ("1", 20)]


def test_bars_in_other_units_read_and_a_users_bracketed_lines_do_not():
    assert parse_redraw("Map:  45%|████▌     | 450/1000 [00:01<00:01, 400.00 examples/s]") == Redraw(
        "Map", 450, 1000, 1)
    assert parse_redraw("Map: 200 examples [00:01, 200.00 examples/s]") == Redraw("Map", 200, None, 1)
    assert parse_redraw("loss 0.532:  3%|▎ | 4/150 [00:00<00:15, 9.4it/s, lr=[0.1]]").bar == "loss #"
    for own in ("checkpoint 2 [14:05, 3/10 saved]", "gpu 2 [10:15, 30.1/80GB]", "." * 1000, "1" * 2000,
                "1" * 390 + " [00:01, 1it/s]"):  # the last: longer than any bar a terminal holds
        assert parse_redraw(own) is None
