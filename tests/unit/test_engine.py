"""engine.stream_lines: whole lines out of the engine's byte chunks."""
from __future__ import annotations

from orchestrate.engine.client import stream_lines


def test_lines_split_across_chunks_come_out_whole_and_the_last_one_too():
    chunks = [b"[node0] st", b"ep 1\n[node0] step 2\n[no", b"de0] done"]
    assert list(stream_lines(chunks)) == [b"[node0] step 1", b"[node0] step 2", b"[node0] done"]


def test_a_stream_that_breaks_off_ends_with_what_it_had():
    def broken():
        yield b"line 1\nhalf"
        raise ConnectionError("container removed")

    assert list(stream_lines(broken())) == [b"line 1", b"half"]
