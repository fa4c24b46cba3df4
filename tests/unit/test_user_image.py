from __future__ import annotations

import pytest

from orchestrate.config.run_config import RunConfig
from orchestrate.engine.user_image import (
    check_dockerfile_base,
    context_files,
    derived_image_spec,
    inputs_digest,
    refers_to_local_files,
)
from orchestrate.errors import UsageError


@pytest.mark.parametrize("text", ["ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n", "FROM $BASE_IMAGE AS dev\n",
                                  "# comment\nFROM ddp-compose-node:latest\nRUN true\n"])
def test_dockerfiles_built_on_the_node_image_are_accepted(text, tmp_path):
    check_dockerfile_base(text, "ddp-compose-node:latest", tmp_path / "Dockerfile")


def test_a_dockerfile_on_another_base_is_refused_with_the_accepted_forms(tmp_path):
    with pytest.raises(UsageError, match=r"must build on the node image: start it with `ARG BASE_IMAGE`.*"
                                         r"found FROM nvidia/cuda:12; pass --no-dockerfile"):
        check_dockerfile_base("FROM nvidia/cuda:12\n", "ddp-compose-node:latest", tmp_path / "Dockerfile")


def test_a_dockerfile_from_the_node_image_itself_is_refused_with_requirements_it_would_leave_out(tmp_path):
    (tmp_path / "requirements.txt").write_text("six\n")
    (tmp_path / "Dockerfile").write_text("FROM ddp-compose-node:latest\nRUN true\n")
    config = RunConfig(workdir=tmp_path, requirements=tmp_path / "requirements.txt", dockerfile=tmp_path / "Dockerfile")
    with pytest.raises(UsageError, match=rf"^{tmp_path}/Dockerfile starts FROM ddp-compose-node:latest, which leaves"
                                         r" out what --requirements installs: start it with `ARG BASE_IMAGE` and"
                                         r" `FROM \$\{BASE_IMAGE\}` to build on both; pass --no-dockerfile"):
        derived_image_spec(config)
    (tmp_path / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN true\n")
    assert derived_image_spec(config).requirements == tmp_path / "requirements.txt"  # the form that builds on both


def test_no_requirements_and_no_dockerfile_need_no_derived_image(tmp_path):
    assert derived_image_spec(RunConfig(workdir=tmp_path)) is None


def test_the_spec_excludes_the_runs_directory_inside_the_context(tmp_path):
    (tmp_path / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n")
    spec = derived_image_spec(RunConfig(workdir=tmp_path, runs_dir=tmp_path / "runs", dockerfile=tmp_path / "Dockerfile"))
    assert spec.context == tmp_path and spec.excluded == ("runs",)


def test_the_spec_holds_the_node_image_the_requirements_and_the_dockerfile(tmp_path):
    (tmp_path / "requirements.txt").write_text("six\n")
    spec = derived_image_spec(RunConfig(workdir=tmp_path, requirements=tmp_path / "requirements.txt"))
    assert (spec.base, spec.requirements, spec.dockerfile, spec.context) == (
        "ddp-compose-node:latest", tmp_path / "requirements.txt", None, None)  # no Dockerfile: no context to send
    (tmp_path / "Dockerfile").write_text("FROM my-node:1\n")  # FROM the node image by its name
    spec = derived_image_spec(RunConfig(workdir=tmp_path, image="my-node:1", dockerfile=tmp_path / "Dockerfile"))
    assert (spec.base, spec.requirements, spec.dockerfile, spec.context) == (
        "my-node:1", None, tmp_path / "Dockerfile", tmp_path)
    with pytest.raises(UsageError, match=rf"^{tmp_path}/Dockerfile must build on the node image: .* found FROM"
                                         r" my-node:1;"):
        derived_image_spec(RunConfig(workdir=tmp_path, dockerfile=tmp_path / "Dockerfile"))
    (tmp_path / "Dockerfile").write_text("RUN true\n")
    with pytest.raises(UsageError, match=r"found FROM nothing;"):
        derived_image_spec(RunConfig(workdir=tmp_path, dockerfile=tmp_path / "Dockerfile"))
    (tmp_path / "Dockerfile").write_bytes(b"# caf\xe9 (Latin-1)\nFROM nvidia/cuda:12\n")  # not UTF-8: still read
    with pytest.raises(UsageError, match=r"found FROM nvidia/cuda:12;"):
        derived_image_spec(RunConfig(workdir=tmp_path, dockerfile=tmp_path / "Dockerfile"))


def test_a_context_without_dockerignore_and_runs_outside_it_send_every_file(tmp_path):
    context = tmp_path / "project"
    (context / "src").mkdir(parents=True)
    (context / "src" / "model.py").write_text("x")
    (context / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY src /app/src\n")
    spec = derived_image_spec(RunConfig(workdir=context, runs_dir=tmp_path / "runs", dockerfile=context / "Dockerfile"))
    assert spec.excluded == ()  # the runs are not in the context: nothing to leave out
    assert context_files(spec.context, spec.dockerfile, spec.excluded) == ["Dockerfile", "src", "src/model.py"]


def test_the_dockerfile_is_sent_whatever_dockerignore_says(tmp_path):
    (tmp_path / "train.py").write_text("x")
    (tmp_path / "Dockerfile").write_text("FROM x\n")
    (tmp_path / ".dockerignore").write_text("Dockerfile\n\n# train.py\n")  # (a blank line and a comment: no patterns)
    assert context_files(tmp_path, tmp_path / "Dockerfile", ()) == [".dockerignore", "Dockerfile", "train.py"]


def test_context_files_follow_dockerignore_and_leave_out_the_runs(tmp_path):
    for name in ("train.py", "data/big.bin", "runs/r1/node0.log", "notes.tmp"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    (tmp_path / "Dockerfile").write_text("FROM x\n")
    (tmp_path / ".dockerignore").write_text("*.tmp\ndata\n")
    files = context_files(tmp_path, tmp_path / "Dockerfile", ("runs",))
    assert sorted(files) == [".dockerignore", "Dockerfile", "train.py"]


def test_the_digest_changes_with_every_input_and_only_then():
    base = inputs_digest("sha256:a", b"six\n", b"FROM x\n", [("train.py", 10, 1)])
    assert base == inputs_digest("sha256:a", b"six\n", b"FROM x\n", [("train.py", 10, 1)])
    for changed in (inputs_digest("sha256:b", b"six\n", b"FROM x\n", [("train.py", 10, 1)]),
                    inputs_digest("sha256:a", b"seven\n", b"FROM x\n", [("train.py", 10, 1)]),
                    inputs_digest("sha256:a", b"six\n", b"FROM y\n", [("train.py", 10, 1)]),
                    inputs_digest("sha256:a", b"six\n", b"FROM x\n", [("train.py", 11, 1)]),
                    inputs_digest("sha256:a", b"six\n", None, [])):
        assert changed != base


@pytest.mark.parametrize("text, local", [("six==1.16\n", False), ("--find-links wheels\nsix\n", True),
                                          ("-e .\n", True), ("./pkg\n", True), ("pkg @ file:///x.whl\n", True),
                                          ("numpy>=1  # -e not really\n", False),
                                          ("/opt/wheels/x.whl\n", True), ("~/src/pkg\n", True),
                                          ("numpy  # -e\n# ./pkg #2\n", False), ("-r more.txt  # # twice\n", True),
                                          ("numpy  # see file:///notes.txt\n", False)])
def test_requirements_naming_host_paths_are_resolved_on_the_host(text, local):
    assert refers_to_local_files(text) is local


@pytest.mark.parametrize("text, sources", [
    ("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN pip install x\n", []),
    ("FROM x\nCOPY requirements.txt setup.py /app/\n", ["requirements.txt", "setup.py"]),
    ("FROM x\nCOPY --chown=1000:1000 ./src /app/src\n", ["src"]),
    ('FROM x\nADD ["conf/a.yaml", "/etc/a.yaml"]\n', ["conf/a.yaml"]),
    ("FROM x\nCOPY . /app\n", ["."]),
    ("FROM x AS b\nRUN make\nFROM x\nCOPY --from=b /out /out\n", []),
    ("FROM x\nCOPY a \\\n     b /dst/\n", ["a", "b"]),
    # every COPY counts, the ones after a stage's copy too
    ("FROM x AS b\nRUN make\nFROM x\nCOPY --from=b /out /out\nCOPY src /app/src\nCOPY conf.yaml /app/\n",
     ["src", "conf.yaml"]),
    ("FROM x\nCOPY /src/ /app/src\nCOPY / /app\n", ["src", "."]),  # the context's root, however written
    ("FROM x\nCOPY onlyone\n", None), ('FROM x\nCOPY ["a", \n', None),  # unreadable: every file counts
])
def test_the_dockerfiles_copies_say_which_context_files_count(text, sources):
    from orchestrate.engine.user_image import copied_sources

    assert copied_sources(text) == sources


def test_outputs_a_job_writes_do_not_count_unless_copied():
    from orchestrate.engine.user_image import files_copied

    files = ["Dockerfile", "src/model.py", "src/data/x.bin", "checkpoints/step-1.pt", "conf.yaml"]
    assert files_copied(files, ["src"]) == ["src/model.py", "src/data/x.bin"]
    assert files_copied(files, ["src/"]) == ["src/model.py", "src/data/x.bin"]
    assert files_copied(files, ["*.yaml"]) == ["conf.yaml"]
    assert files_copied(files, []) == []
    assert files_copied(files, None) == files and files_copied(files, ["."]) == files
