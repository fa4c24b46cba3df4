from __future__ import annotations

import pytest

from orchestrate.config.fault_spec import parse_fault
from orchestrate.config.run_config import RunConfig
from orchestrate.errors import UsageError


ELASTIC = dict(rdzv="c10d")


def test_a_module_whose_package_is_in_the_work_directory_is_looked_for_there_before_the_nodes_start(tmp_path):
    """python -m looks in the work directory first: where the module's top level is there, a
    missing part of it (or a package with no __main__) is refused now, not after the nodes came
    up; a top level that is not there may be the image's (app, as the demo runs it), and passes."""
    for path in ("pkg/__init__.py", "pkg/a.py", "pkg/sub/x.py", "pkg/run/__init__.py", "pkg/run/__main__.py",
                 "mod.py", "ext.cpython-311-x86_64-linux-gnu.so", "nsdir/x.py", "both/__init__.py", "both.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    (tmp_path / "pkg" / "vendor").symlink_to("/opt/only-in-the-nodes")  # a link the nodes may resolve
    (tmp_path / "plug").mkdir()
    (tmp_path / "plug" / "__init__.py").write_text("__path__ = __import__('pkgutil').extend_path(__path__, __name__)\n")
    workdir = tmp_path.resolve()
    for taken in ("pkg.a", "pkg.run", "pkg.sub.x", "mod", "ext", "nsdir.nope", "app.toy", "other.thing",
                  "pkg.vendor.x", "plug.elsewhere"):
        RunConfig(workdir=tmp_path, target=("-m", taken, "--flag"))
    for module, message in (
            ("pkg.b", f"-m pkg.b: no module pkg.b in the work directory {workdir} (neither pkg/b.py nor pkg/b/ is"
                      " there)"),
            ("pkg.sub.y", f"-m pkg.sub.y: no module pkg.sub.y in the work directory {workdir} (neither pkg/sub/y.py"
                          " nor pkg/sub/y/ is there)"),
            ("pkg", f"-m pkg: pkg/ is a package with no __main__.py, so python -m cannot run it (work directory"
                    f" {workdir}); name one of its modules"),
            ("both", f"-m both: both/ is a package with no __main__.py, so python -m cannot run it (work directory"
                     f" {workdir}); name one of its modules"),  # the package comes before both.py, as in Python
            ("mod.x", f"-m mod.x: mod.py is a module, not a package, so it has no x (work directory {workdir})")):
        with pytest.raises(UsageError) as refused:
            RunConfig(workdir=tmp_path, target=("-m", module))
        assert str(refused.value) == message


def test_the_long_spelling_of_minus_m_is_taken_as_minus_m_which_the_nodes_run(tmp_path):
    """python and torchrun both take --module for -m; the nodes' start-up runs "-m" alone, so the
    config keeps one spelling, and checks the module the same way."""
    (tmp_path / "mod.py").write_text("")
    assert RunConfig(workdir=tmp_path, target=("--module", "mod", "--flag")).target == ("-m", "mod", "--flag")
    with pytest.raises(UsageError, match="-m needs a module name"):
        RunConfig(workdir=tmp_path, target=("--module",))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(nodes=0), "--nodes must be a positive integer, got 0"),
        (dict(nproc_per_node=0), "--nproc-per-node must be a positive integer, got 0"),
        (dict(gpus_per_node=-1), "--gpus-per-node must be 0 or more, got -1"),
        (dict(gpus_per_node=3, nproc_per_node=2, backend="nccl"),
         "--gpus-per-node 3 cannot be split evenly among 2 processes (--nproc-per-node 2)"),
        (dict(nodes=2, gpus_per_node=3, node_nprocs=(3, 2), backend="nccl"),  # the second node's count
         "--gpus-per-node 3 cannot be split evenly among 2 processes (--nproc-per-node 3,2)"),
        (dict(backend="mpi"), "--backend must be gloo or nccl, got 'mpi'"),
        (dict(backend="nccl"), "--backend nccl needs GPUs (--gpus-per-node 1 or more)"),
        (dict(gpus_per_node=1, backend="nccl", nccl_as_gloo=True),
         "--nccl-as-gloo gives scripts that name nccl gloo instead: use it with --backend gloo (or --cpu)"),
        (dict(gpus_per_node=1, nproc_per_node=2, backend="nccl"),
         "--nproc-per-node 2 is more than the 1 GPU(s) per node: add --share-gpus to let processes share them"),
        (dict(master_port=0), "--master-port must be in 1-65535, got 0"),
        (dict(master_port=65536), "--master-port must be in 1-65535, got 65536"),
        (dict(stop_grace_s=-0.5), "--stop-grace must be 0 or more, got -0.5"),
        (dict(lease_timeout_s=0), "the launcher's lease must be positive, got 0 s"),
        (dict(hang_timeout_s=0), "--hang-timeout must be positive, got 0"),
        (dict(hang_diagnose_after_s=-1), "--hang-diagnose-after must be 0 or more, got -1"),
        (dict(collective_timeout_s=0), "--collective-timeout must be positive, got 0"),
        (dict(image=""), "--image must not be empty"),
        (dict(rdzv="etcd"), "--rdzv must be static or c10d, got 'etcd'"),
        (dict(ELASTIC, max_restarts=-1), "--max-restarts must be 0 or more, got -1"),
        (dict(ELASTIC, rdzv_timeout_s=0), "--rdzv-timeout must be positive, got 0"),
        (dict(ELASTIC, restart="some"), "--restart must be all or node, got 'some'"),
        (dict(ELASTIC, rdzv_store="etcd"), "--rdzv-store must be node0 or container, got 'etcd'"),
        (dict(min_nodes=1), "--nnodes MIN:MAX needs --rdzv c10d (elastic mode)"),
        (dict(max_nodes=3), "--nnodes MIN:MAX needs --rdzv c10d (elastic mode)"),
        (dict(restart="node"), "--restart and --rdzv-store are for --rdzv c10d (elastic mode): a static job restarts"
                               " nothing and has no rendezvous store"),
        (dict(max_restarts=2), "--max-restarts 2 is for --rdzv c10d (elastic mode): a static job restarts nothing"
                               " (its torchrun runs with --max-restarts 0)"),
        (dict(rdzv_timeout_s=30), "--rdzv-timeout 30 is for --rdzv c10d (elastic mode): a static job's nodes meet at"
                                  " node0's master port, with no rendezvous to time"),
        (dict(ELASTIC, master_port=29501), "--master-port 29501 is for a static job: an elastic job's c10d rendezvous"
                                           " is on port 29400 of its store's host"),
        (dict(ELASTIC, nodes=2, min_nodes=3), "--nnodes 3:2 must satisfy 1 <= MIN <= --nodes (2) <= MAX"),
        (dict(user_env={"1BAD": "x"}), "--env: '1BAD' is not a variable name (letters, digits, _; not starting with a"
                                     " digit)"),
        (dict(run_as="alice"), "run_as must be UID:GID, got 'alice'"),
        (dict(cpus_per_node=0), "--cpus-per-node must be positive, e.g. 1 or 0.5, got 0"),
        (dict(memory_per_node=6 * 1024**2 - 1), "--memory-per-node must be at least 6m, got 6291455 bytes"),
        (dict(requirements="nowhere.txt"), "--requirements file 'nowhere.txt' not found"),
        (dict(dockerfile="Nodefile"), "--dockerfile file 'Nodefile' not found"),
        (dict(dockerfile="/"), "--dockerfile file '/' is a directory, not a file"),
        (dict(target=("missing.py",)), "script 'missing.py' not found in work directory {workdir}"),
        (dict(target=("-m",)), "-m needs a module name, usage example: -- -m app.toy. Given: nothing"),
        (dict(target=("--module", "not a module")),
         "-m needs a module name, usage example: -- -m app.toy. Given: not a module"),
        (dict(target=("--weird",)),
         "TARGET must be a script path or -m MODULE, usage example: -- train.py --epochs 2. Given: --weird"),
        (dict(target=("/abs/train.py",)), "script '/abs/train.py' must be a path relative to the work directory"
                                          " {workdir} (or give --workdir /abs and the script as 'train.py')"),
    ],
)
def test_invalid_config_is_refused_with_the_rule(tmp_path, overrides, message):
    with pytest.raises(UsageError) as refused:
        RunConfig(workdir=tmp_path, **overrides)
    assert str(refused.value) == message.format(workdir=tmp_path.resolve())


def test_every_bound_of_the_config_is_taken(tmp_path):
    """The edges of each rule above, on the side that is allowed."""
    for overrides in (dict(master_port=1), dict(master_port=65535), dict(stop_grace_s=0), dict(lease_timeout_s=0.5),
                      dict(hang_timeout_s=0.5), dict(hang_diagnose_after_s=0), dict(hang_diagnose_after_s=0.5),
                      dict(collective_timeout_s=0.5), dict(ELASTIC, rdzv_timeout_s=0.5), dict(cpus_per_node=0.5),
                      dict(memory_per_node=6 * 1024**2), dict(gpus_per_node=4, nproc_per_node=4, backend="nccl"),
                      dict(gpus_per_node=1, nproc_per_node=3, backend="nccl", share_gpus=True),
                      dict(ELASTIC, nodes=2, min_nodes=1, max_nodes=4, max_restarts=0)):
        RunConfig(workdir=tmp_path, **overrides)  # raises where a bound is off by one


def test_a_config_keeps_its_paths_absolute_and_its_elastic_range_filled_in(tmp_path, monkeypatch):
    (tmp_path / "reqs.txt").write_text("numpy\n")
    (tmp_path / "Nodefile").write_text("FROM ddp-compose-node:latest\n")
    monkeypatch.chdir(tmp_path)
    config = RunConfig(workdir=".", requirements="reqs.txt", dockerfile="Nodefile", project_root=".")
    assert (config.workdir, config.requirements, config.dockerfile, config.project_root) == (
        tmp_path.resolve(), tmp_path.resolve() / "reqs.txt", tmp_path.resolve() / "Nodefile", tmp_path.resolve())
    elastic = RunConfig(workdir=tmp_path, nodes=3, rdzv="c10d")
    assert (elastic.min_nodes, elastic.max_nodes) == (3, 3)
    # a rank fault may aim at a rank of the nodes that may yet join
    grown = RunConfig(workdir=tmp_path, nodes=2, max_nodes=4, nproc_per_node=2, rdzv="c10d",
                      faults=(parse_fault("kill-rank:7"),))
    assert grown.max_nodes == 4
    with pytest.raises(UsageError) as refused:
        RunConfig(workdir=tmp_path, nodes=2, max_nodes=4, nproc_per_node=2, rdzv="c10d",
                  faults=(parse_fault("kill-rank:8"),))
    assert str(refused.value) == "--fault kill-rank:8: no rank 8 in this run (ranks 0-7)"


@pytest.mark.parametrize("rendezvous, store_container", [
    ({"rdzv": "c10d", "rdzv_store": "container"}, True),
    ({"rdzv": "c10d", "rdzv_store": "node0"}, False),  # node0's torchrun agent holds it
    ({}, False),  # a static job has no rendezvous store
])
def test_a_fault_to_the_store_is_for_a_run_whose_store_is_a_container_of_its_own(tmp_path, rendezvous,
                                                                                 store_container):
    faults = (parse_fault("kill:store@step=3"),)
    if store_container:
        assert RunConfig(workdir=tmp_path, faults=faults, **rendezvous).faults == faults
        return
    with pytest.raises(UsageError, match=r"^--fault kill:store@step=3: the rendezvous store is a container of the"
                                         r" run's own only with --rdzv c10d --rdzv-store container;"):
        RunConfig(workdir=tmp_path, faults=faults, **rendezvous)


def test_missing_workdir_is_refused(tmp_path):
    with pytest.raises(UsageError) as refused:
        RunConfig(workdir=tmp_path / "nope")
    assert str(refused.value) == f"work directory {str(tmp_path / 'nope')!r} does not exist or is not a directory"


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
                                             r" the script as 'train.py', or move the script into it$"):
            RunConfig(workdir=work, target=(target,))
    with pytest.raises(UsageError, match=r"\(give it as 'sub/train.py'\)"):
        RunConfig(workdir=work, target=(str(work / "sub" / "train.py"),))
    with pytest.raises(UsageError, match=rf"\(or give --workdir {other} and the script as 'train.py'\)"):
        RunConfig(workdir=work, target=(str(other / "train.py"),))
    assert RunConfig(workdir=work, target=("sub/../sub/train.py",)).target == ("sub/../sub/train.py",)
    # out of the work directory and back in: here it is the same file, in the nodes /workspace/../work is /work
    with pytest.raises(UsageError, match=rf"script '../work/sub/train.py' climbs out of the work directory {work} and"
                                         r" back: in the nodes nothing of the host is above it; give it as"
                                         r" 'sub/train.py'$"):
        RunConfig(workdir=work, target=("../work/sub/train.py",))


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


def test_memory_sizes_read_as_docker_reads_them_and_print_back_in_the_largest_whole_unit():
    from orchestrate.config.run_config import parse_memory
    from orchestrate.text import format_bytes

    assert [parse_memory(t) for t in ("512m", " 2g ", "1.5G", "6291456")] == [512 * 1024**2, 2 * 1024**3,
                                                                               1536 * 1024**2, 6 * 1024**2]
    for text, message in (("lots", "--memory-per-node: expected a size like 512m or 2g. Given: 'lots'"),
                          ("5m", "--memory-per-node must be at least 6m (the engine's minimum), got '5m'")):
        with pytest.raises(UsageError) as refused:
            parse_memory(text)
        assert str(refused.value) == message
    assert [format_bytes(n) for n in (2 * 1024**3, 1536 * 1024**2, 512 * 1024**2, 1024, 1025, 1000)] == [
        "2g", "1536m", "512m", "1k", "1025b", "1000b"]
    assert [format_bytes(n, upper=True) for n in (2 * 1024**3, 1536 * 1024**2, 1024, 1025, 4)] == [
        "2G", "1536M", "1K", "1025", "4"]  # (a message size, as the benchmarks say one)
