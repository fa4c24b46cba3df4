from __future__ import annotations

import pytest

from orchestrate.config.fault_spec import parse_fault
from orchestrate.config.run_config import RunConfig
from orchestrate.errors import UsageError


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(nodes=0), "--nodes must be a positive integer, got 0"),
        (dict(nproc_per_node=0), "--nproc-per-node must be a positive integer, got 0"),
        (dict(gpus_per_node=-1), "--gpus-per-node must be 0 or more"),
        (dict(master_port=70000), "--master-port must be in 1-65535"),
        (dict(target=("missing.py",)), "script 'missing.py' not found in work directory"),
        (dict(target=("-m",)), "-m needs a module name"),
        (dict(target=("-m", "not a module")), "-m needs a module name"),
        (dict(target=("--weird",)), "TARGET must be a script path or -m MODULE"),
        (dict(target=("/abs/train.py",)), "must be a path relative to the work directory"),
    ],
)
def test_invalid_config_is_refused_with_the_rule(tmp_path, overrides, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        RunConfig(workdir=tmp_path, **overrides)


def test_missing_workdir_is_refused(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        RunConfig(workdir=tmp_path / "nope")


def test_script_relative_to_workdir_is_accepted_and_paths_are_absolute(tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    config = RunConfig(workdir=tmp_path, target=("train.py", "--epochs", "2"), runs_dir="runs")
    assert config.target == ("train.py", "--epochs", "2")
    assert config.workdir.is_absolute() and config.runs_dir.is_absolute()


def test_empty_target_means_the_default_job(tmp_path):
    assert RunConfig(workdir=tmp_path, target=()).target == ("-m", "app.toy")


def test_a_script_outside_the_work_directory_is_refused_naming_the_workdir_that_would_hold_it(tmp_path):
    """Only the work directory is mounted in the nodes: `../other/train.py` (or a link out of it)
    failed in every node with FileNotFoundError: '/other/train.py'."""
    work, other = tmp_path / "work", tmp_path / "other"
    (work / "sub").mkdir(parents=True)
    other.mkdir()
    (other / "train.py").write_text("print('hi')\n")
    (work / "sub" / "train.py").write_text("print('hi')\n")
    (work / "linked.py").symlink_to(other / "train.py")
    for target in ("../other/train.py", "linked.py"):
        with pytest.raises(UsageError, match=rf"script '{target}' is outside the work directory {work}: only the"
                                             rf" work directory is mounted in the nodes; give --workdir {other} and"
                                             r" the script as 'train.py'"):
            RunConfig(workdir=work, target=(target,))
    with pytest.raises(UsageError, match=r"\(give it as 'sub/train.py'\)"):
        RunConfig(workdir=work, target=(str(work / "sub" / "train.py"),))
    with pytest.raises(UsageError, match=rf"\(or give --workdir {other} and the script as 'train.py'\)"):
        RunConfig(workdir=work, target=(str(other / "train.py"),))
    assert RunConfig(workdir=work, target=("sub/../sub/train.py",)).target == ("sub/../sub/train.py",)


@pytest.mark.parametrize("overrides, message", [
    (dict(nodes=2), "--fault lose:node1@step=3: a lost node is for an elastic job that goes on without it"
                    " (--rdzv c10d --nnodes MIN:2 with MIN below 2); a static job cannot, and kill:node1 shows it die"),
    (dict(nodes=2, rdzv="c10d", max_restarts=3),
     "--fault lose:node1@step=3: losing node1 leaves 1 of 2 nodes, fewer than --nnodes MIN (2): the job could not go on;"
     " give --nnodes 1:2"),
    (dict(nodes=3, rdzv="c10d", min_nodes=2, max_restarts=3, more=("lose:node2@t=5",)),
     "--fault lose:node1@step=3: losing node1 and node2 leaves 1 of 3 nodes, fewer than --nnodes MIN (2): the job"
     " could not go on; give --nnodes 1:3"),
    (dict(nodes=2, rdzv="c10d", min_nodes=1, max_restarts=3, more=("lose:node0@t=5",)),
     "--fault lose:node1@step=3: losing node0 and node1 leaves no node: the job could not go on"),
    (dict(nodes=3, rdzv="c10d", min_nodes=1, max_restarts=3, more=("lose:node1@step=+2",)),
     "--fault lose:node1@step=3: node1 is lost twice, and a lost node is gone for good: the second loss could never"
     " fire"),
    (dict(nodes=4, rdzv="c10d", min_nodes=1, max_restarts=3, more=("lose:node2@t=5", "lose:node2@step=+2")),
     "--fault lose:node1@step=3: node2 is lost twice, and a lost node is gone for good: the second loss could never"
     " fire"),
    (dict(nodes=2, rdzv="c10d", min_nodes=1, max_restarts=0),
     "--fault lose:node1@step=3: the nodes left go on only where torchrun may restart their workers in a smaller"
     " world: give --max-restarts 1 or more"),
])
def test_a_lost_node_the_job_could_not_go_on_without_is_refused(tmp_path, overrides, message):
    overrides = dict(overrides)  # the parameter's own dict is shared by every run of the test (mutmut runs it twice)
    more = overrides.pop("more", ())
    faults = tuple(parse_fault(text) for text in ("lose:node1@step=3", *more))
    with pytest.raises(UsageError) as refused:
        RunConfig(workdir=tmp_path, faults=faults, **overrides)
    assert str(refused.value) == message


def test_a_lost_node_an_elastic_job_can_go_on_without_is_taken(tmp_path):
    faults = (parse_fault("lose:node1@step=3"), parse_fault("kill:node2@t=4"))
    config = RunConfig(workdir=tmp_path, nodes=3, rdzv="c10d", min_nodes=2, max_restarts=1, faults=faults)
    assert [f.action.value for f in config.faults] == ["lose", "kill"]
