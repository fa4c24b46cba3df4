"""engine.stream_lines: whole lines out of the engine's byte chunks."""
from __future__ import annotations

from orchestrate.engine.client import stream_lines, unreachable_why


def test_lines_split_across_chunks_come_out_whole_and_the_last_one_too():
    chunks = [b"[node0] st", b"ep 1\n[node0] step 2\n[no", b"de0] done"]
    assert list(stream_lines(chunks)) == [b"[node0] step 1", b"[node0] step 2", b"[node0] done"]


def test_a_stream_that_breaks_off_ends_with_what_it_had():
    def broken():
        yield b"line 1\nhalf"
        raise ConnectionError("container removed")

    assert list(stream_lines(broken())) == [b"line 1", b"half"]


def test_an_unreachable_engine_is_said_in_the_systems_own_words_never_cut_mid_word():
    """The SDK's error nests a URL and a repr: cut at 160 characters it ended `NewConnectionError("HT`."""
    refused = ("Error while fetching server API version: HTTPConnectionPool(host='127.0.0.1', port=1): Max retries"
               " exceeded with url: /version (Caused by NewConnectionError(\"HTTPConnection(host='127.0.0.1', port=1):"
               " Failed to establish a new connection: [Errno 111] Connection refused\"))")
    assert unreachable_why(refused) == "Connection refused"
    no_socket = ("Error while fetching server API version: ('Connection aborted.', FileNotFoundError(2, 'No such file"
                 " or directory'))")
    assert unreachable_why(no_socket) == "No such file or directory"
    assert unreachable_why("engine gone") == "engine gone"
    long = "word " * 50
    assert unreachable_why(long) == ("word " * 32).strip() + " ..."
