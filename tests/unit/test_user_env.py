from __future__ import annotations

import pytest

from orchestrate.config.user_env import (
    copy_env,
    copy_env_notes,
    mask_assignments,
    mask_env_options,
    merge_user_env,
    parse_assignment,
    parse_env_file,
)
from orchestrate.errors import UsageError


def test_assignment_keeps_everything_after_the_first_equals_sign():
    assert parse_assignment("URL=http://x/?a=b") == ("URL", "http://x/?a=b")
    assert parse_assignment("EMPTY=") == ("EMPTY", "")


@pytest.mark.parametrize("text, message", [
    ("NOVALUE", "expected KEY=VALUE, e.g. --env WANDB_MODE=offline. Given: 'NOVALUE'"),
    ("=x", "expected KEY=VALUE"),
    ("1ABC=x", "'1ABC' is not a variable name"),
    ("RANK=3", "RANK is set by torchrun or the launcher"),
    ("PET_NNODES=4", "PET_NNODES is set by torchrun or the launcher"),
    ("MASTER_ADDR=x", "MASTER_ADDR is set by torchrun"),
])
def test_bad_assignments_are_refused_with_the_rule(text, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("?", r"\?")):
        parse_assignment(text)


def test_env_file_takes_comments_export_and_quotes():
    text = "# setting\n\nA=1\nexport B=two words\nC='quoted # not a comment'\nD=\"x\"\n"
    assert parse_env_file(text, "job.env") == {"A": "1", "B": "two words", "C": "quoted # not a comment", "D": "x"}


def test_env_file_errors_name_the_file_and_line():
    with pytest.raises(UsageError, match=r"--env-file job.env:3: expected KEY=VALUE"):
        parse_env_file("A=1\n# ok\nbroken line\n", "job.env")


def test_copy_env_takes_matching_host_variables_only():
    host = {"NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "1", "WANDB_MODE": "offline", "HOME": "/root"}
    assert copy_env(["NCCL_*"], host) == {"NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "1"}
    assert copy_env(["WANDB_MODE", "NOPE_*"], host) == {"WANDB_MODE": "offline"}
    with pytest.raises(UsageError, match="LOCAL_RANK is set by torchrun"):
        copy_env(["*RANK"], {"LOCAL_RANK": "0"})


def test_a_copy_env_pattern_that_matches_nothing_is_said_and_one_that_matches_is_not():
    host = {"NCCL_DEBUG": "INFO", "HOME": "/root"}
    assert copy_env_notes(["NCCL_*", "WANDB_*", "HOME", "home"], host) == [
        f"--copy-env {p!r}: no variable of this machine's environment matches it; nothing copied"
        for p in ("WANDB_*", "home")]  # names match case and all, as copy_env does


def test_env_precedence_is_file_then_copied_then_explicit():
    merged = merge_user_env({"A": "file", "B": "file", "C": "file"}, {"B": "host", "C": "host"}, [("C", "cli")])
    assert merged == {"A": "file", "B": "host", "C": "cli"}


def test_the_values_of_the_users_variables_are_masked_in_a_recorded_command_line():
    import shlex

    argv = ["run", "--env", "WANDB_API_KEY=supersecret", "--env", "B=a b", "--env=C=x y", "--nodes", "2",
            "--", "train.py", "--note", "MYWANDB_API_KEY=kept"]
    assert mask_env_options(argv) == ["run", "--env", "WANDB_API_KEY=***", "--env", "B=***", "--env=C=***",
                                      "--nodes", "2", "--", "train.py", "--note", "MYWANDB_API_KEY=kept"]
    line = "python -m orchestrate " + shlex.join(argv)
    masked = mask_assignments(line, ["WANDB_API_KEY", "B", "C"])
    assert all(secret not in masked for secret in ("supersecret", "a b", "x y"))
    assert "MYWANDB_API_KEY=kept" in masked  # another variable that only ends the same way
    assert shlex.split(masked)[5:7] == ["WANDB_API_KEY=***", "--env"]


def test_a_secret_with_equals_signs_is_masked_whole_and_only_env_options_are_masked():
    argv = ["A=b", "run", "--env", "TOKEN=c2VjcmV0=", "--env=KEY=a=b", "--", "train.py", "--filter=a=b", "x=y"]
    assert mask_env_options(argv) == ["A=b", "run", "--env", "TOKEN=***", "--env=KEY=***", "--", "train.py",
                                      "--filter=a=b", "x=y"]  # a base64 value ends in "=": none of it is kept
    assert mask_assignments("TOKEN=c2VjcmV0= next", ["TOKEN"]) == "TOKEN=*** next"


def test_an_assignment_quoted_whole_in_either_quote_is_masked_whole():
    assert mask_assignments("""x 'API_KEY=a secret' "API_KEY=another secret" y""", ["API_KEY"]) == \
        """x 'API_KEY=***' "API_KEY=***" y"""


def test_env_file_values_are_read_as_composes_quotes_escapes_comments_and_export_with_any_spaces():
    text = ("export    A=1\nEMPTY=\"\"\nX=XabcX\nQ=\"quoted\" # a comment\nU=x # a comment\nH=x#not-one\n"
            "D=\"a\\\"b\\nc\\\\d\"\nS='lit\\n $HOME'  # and one\nT=\"  kept  \"\n")
    assert parse_env_file(text, "job.env") == {
        "A": "1", "EMPTY": "", "X": "XabcX", "Q": "quoted", "U": "x", "H": "x#not-one", "D": 'a"b\nc\\d',
        "S": "lit\\n $HOME", "T": "  kept  "}


@pytest.mark.parametrize("line, message", [
    ("OPEN='abc", "--env-file job.env:2: OPEN: the value's opening ' is never closed"),
    ('MIXED="a\'', "--env-file job.env:2: MIXED: the value's opening \" is never closed"),
    ("Q='", "--env-file job.env:2: Q: the value's opening ' is never closed"),
    ('E="a\\"', "--env-file job.env:2: E: the value's opening \" is never closed"),  # its quote is escaped
    ('AFTER="a" b', "--env-file job.env:2: AFTER: 'b' follows the closing \": quote the value whole"),
])
def test_an_env_file_quote_never_closed_or_text_after_it_is_refused_naming_the_line(line, message):
    with pytest.raises(UsageError) as refused:
        parse_env_file(f"A=1\n{line}\n", "job.env")
    assert str(refused.value).startswith(message), str(refused.value)


def test_path_is_the_images_and_refused_from_every_source_with_where_to_set_it():
    for refuse in (lambda: parse_assignment("PATH=/usr/bin"), lambda: parse_env_file("PATH=/x\n", "job.env"),
                   lambda: copy_env(["PATH"], {"PATH": "/usr/bin"})):
        with pytest.raises(UsageError, match=r"PATH is the node image's, by which the nodes find python3 and"
                                             r" torchrun; .* Dockerfile \(ENV PATH=/your/bin:\$\{PATH\}\)$"):
            refuse()


def test_a_pattern_leaves_this_machines_own_shell_out_and_says_so_but_a_name_alone_is_copied():
    host = {"PATH": "/usr/bin", "HOME": "/root", "PWD": "/work", "HOSTNAME": "box", "_": "/usr/bin/python",
            "LANG": "C.UTF-8", "WANDB_MODE": "offline", "NCCL_DEBUG": "INFO"}
    assert copy_env(["*"], host) == {"LANG": "C.UTF-8", "WANDB_MODE": "offline", "NCCL_DEBUG": "INFO"}
    assert copy_env(["HOME", "H*"], host) == {"HOME": "/root"}
    assert copy_env_notes(["*", "HOME", "NCCL_*"], host) == [
        "--copy-env '*': left out HOME, HOSTNAME, PATH, PWD, _, this machine's own shell's; the nodes keep theirs"
        " (name one alone to copy it)"]


def test_a_reserved_name_is_refused_naming_where_it_came_from():
    with pytest.raises(UsageError, match=r"^--env-file job.env:2: RANK is set by torchrun"):
        parse_env_file("A=1\nRANK=3\n", "job.env")
    with pytest.raises(UsageError, match=r"^--copy-env \*RANK: LOCAL_RANK is set by torchrun"):
        copy_env(["*RANK"], {"LOCAL_RANK": "0"})
    with pytest.raises(UsageError, match=r"^--copy-env: expected a variable name or pattern, e.g."
                                         r" --copy-env 'NCCL_\*'$"):
        copy_env([""], {})
    with pytest.raises(UsageError, match=r"^--env: 'A-B' is not a variable name"):
        parse_assignment("A-B=1")
