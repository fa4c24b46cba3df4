"""The parsers of run's options and an option's reading of a keyword value, in process: the command
line's tests reach them only through a subprocess."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrate.config.link import parse_link
from orchestrate.config.options import (
    OPTIONS_BY_DEST,
    int_at_least,
    node_range,
    non_negative_float,
    non_negative_int,
    non_negative_seconds,
    nproc_counts,
    positive_float,
    positive_int,
    seconds,
)
from orchestrate.errors import UsageError


def refusal(parse, text) -> str:
    with pytest.raises(UsageError) as refused:
        parse(text)
    return str(refused.value)


def test_integers_are_taken_from_their_minimum_up():
    assert (positive_int("1"), positive_int(" 7 "), non_negative_int("0"), int_at_least(3)("3")) == (1, 7, 0, 3)
    assert refusal(positive_int, "0") == "expected a positive integer, got '0'"
    assert refusal(positive_int, "abc") == "expected a positive integer, got 'abc'"
    assert refusal(positive_int, "1.5") == "expected a positive integer, got '1.5'"
    assert refusal(non_negative_int, "-1") == "expected an integer >= 0, got '-1'"
    assert refusal(non_negative_int, "x") == "expected an integer >= 0, got 'x'"
    assert refusal(int_at_least(3), "2") == "expected an integer >= 3, got '2'"


def test_process_counts_are_one_for_every_node_or_one_per_node():
    assert nproc_counts("2") == 2
    assert nproc_counts("2, 1,1") == (2, 1, 1)
    assert nproc_counts("3,3") == (3, 3)  # even counts stay a tuple: the request says how they were given
    assert refusal(nproc_counts, "2,0") == "expected a positive integer, got '0'"
    assert refusal(nproc_counts, "2,") == "expected a positive integer, got ''"


def test_positive_numbers_are_above_zero():
    assert (positive_float("0.5"), positive_float("2"), positive_float("1e-3")) == (0.5, 2.0, 0.001)
    for text in ("0", "-1", "abc", "nan"):
        assert refusal(positive_float, text) == f"expected a positive number, e.g. 1 or 0.5, got {text!r}"


def test_numbers_of_zero_or_more():
    assert (non_negative_float("0"), non_negative_float("1e-6")) == (0.0, 1e-06)
    for text in ("-0.1", "abc"):
        assert refusal(non_negative_float, text) == f"expected a number of 0 or more, e.g. 1e-6, got {text!r}"


def test_seconds_are_numbers_and_some_are_zero_or_more():
    assert (seconds("60"), seconds("-1"), seconds("0.25")) == (60.0, -1.0, 0.25)
    assert refusal(seconds, "1m") == "expected seconds, e.g. 60, got '1m'"
    assert (non_negative_seconds("0"), non_negative_seconds("5")) == (0.0, 5.0)
    assert refusal(non_negative_seconds, "-1") == "expected seconds, 0 or more, got '-1'"
    assert refusal(non_negative_seconds, "soon") == "expected seconds, e.g. 60, got 'soon'"


def test_a_node_range_is_min_max_or_one_count():
    assert (node_range("1:2"), node_range("2"), node_range("3:3")) == ((1, 2), (2, 2), (3, 3))
    for text in ("1-2", "a:2", "1:b", ":2"):
        assert refusal(node_range, text) == f"expected MIN:MAX, e.g. 1:2, got {text!r}"
    for text in ("0:2", "3:2", "0"):
        assert refusal(node_range, text) == f"expected 1 <= MIN <= MAX, got {text!r}"


def test_an_option_parses_text_and_takes_other_values_as_they_are():
    nodes, link = OPTIONS_BY_DEST["nodes"], OPTIONS_BY_DEST["link"]
    assert (nodes.value("3"), nodes.value(3)) == (3, 3)
    assert link.value("1gbe") == parse_link("1gbe") == link.value(parse_link("1gbe"))
    assert OPTIONS_BY_DEST["image"].value("mine:1") == "mine:1"  # text without a parser is its own value


def test_a_repeated_option_takes_one_text_or_many_values():
    env, faults = OPTIONS_BY_DEST["env"], OPTIONS_BY_DEST["faults"]
    assert env.value("A=1") == (("A", "1"),)  # one text is one value, not its characters
    assert OPTIONS_BY_DEST["env_file"].value(Path("a.env")) == (Path("a.env"),)  # so is one path
    assert env.value(["A=1", ("B", "2")]) == (("A", "1"), ("B", "2"))
    assert [str(f) for f in faults.value(("kill:node1@t=5", "pause:node0@t=1..2"))] == [
        "kill:node1@t=5", "pause:node0@t=1..2"]


def test_an_option_refuses_a_value_outside_its_choices_naming_them():
    assert refusal(OPTIONS_BY_DEST["backend"].value, "mpi") == "--backend must be one of auto, nccl, gloo, got 'mpi'"
    assert refusal(OPTIONS_BY_DEST["restart"].value, 1) == "--restart must be one of all, node, got 1"
    assert OPTIONS_BY_DEST["restart"].value("node") == "node"


def test_a_parsers_refusal_names_the_flag_once():
    assert refusal(OPTIONS_BY_DEST["nodes"].value, "0") == "--nodes: expected a positive integer, got '0'"
    assert refusal(OPTIONS_BY_DEST["nnodes"].value, "2:1") == "--nnodes: expected 1 <= MIN <= MAX, got '2:1'"
    # a parser whose own words name the flag is not prefixed again
    assert refusal(OPTIONS_BY_DEST["memory_per_node"].value, "abc") == (
        "--memory-per-node: expected a size like 512m or 2g. Given: 'abc'")
    assert refusal(OPTIONS_BY_DEST["link"].value, "fast").startswith("invalid --link 'fast'")


@pytest.mark.parametrize("name", ["ddp-compose-node:latest", "ddp-compose-node", "localhost:5000/team/img:v1",
                                  "nvcr.io/nvidia/pytorch:24.01-py3", "python:3.11-slim-bookworm", "ghcr.io/a_b/c-d",
                                  "ddp-compose-user:3f2a9c0e", "img@sha256:" + "0" * 64, "img:tag@sha256:" + "f" * 64,
                                  "[::1]:5000/img:v1", "[fe80::1]/team/img"])
def test_an_image_name_the_engine_takes_is_taken_as_given(name):
    from orchestrate.config.options import image_reference

    assert image_reference(name) == name


@pytest.mark.parametrize("name", ["Bad:Tag::", "My-Image", "", "a b", ":latest", "img:", "img:-x", "img:a/b",
                                  "a//b", "-img", "img@sha256:abc", "x" * 256, "[::1/img", "[xyz]:5000/img"])
def test_an_image_name_the_engine_would_refuse_is_refused_in_one_line(name):
    from orchestrate.config.options import image_reference
    from orchestrate.errors import UsageError

    with pytest.raises(UsageError, match=r"^expected an image name like ddp-compose-node:latest or"
                                         rf" registry:5000/team/image:tag \(lower-case, then :TAG\), got {re.escape(repr(name))}$"):
        image_reference(name)


def test_a_build_tags_a_name_and_refuses_a_digest_in_one_line():
    from orchestrate.config.options import image_tag
    from orchestrate.errors import UsageError

    assert image_tag("[::1]:5000/img:v1") == "[::1]:5000/img:v1"
    with pytest.raises(UsageError, match=r"^a build tags a name, not a digest \(the engine gives the digest\): give a"
                                         r" name like img:TAG, got 'img@sha256:0{64}'$"):
        image_tag("img@sha256:" + "0" * 64)
    with pytest.raises(UsageError, match="^expected an image name"):  # a bad name is still said as such
        image_tag("Bad:Tag::")


@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "Infinity"])
def test_no_count_or_duration_is_infinite_or_not_a_number_though_float_takes_the_text(text):
    assert refusal(positive_float, text) == f"expected a positive number, e.g. 1 or 0.5, got {text!r}"
    assert refusal(non_negative_float, text) == f"expected a number of 0 or more, e.g. 1e-6, got {text!r}"
    assert refusal(seconds, text) == f"expected seconds, e.g. 60, got {text!r}"
    assert refusal(non_negative_seconds, text) == f"expected seconds, e.g. 60, got {text!r}"
