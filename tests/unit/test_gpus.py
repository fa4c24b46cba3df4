from __future__ import annotations

import pytest

from orchestrate.config.gpu_layout import GpuLayout, resolve_gpu_layout
from orchestrate.engine.gpus import GpuInventory, detect_gpus, has_nvidia_cdi
from orchestrate.errors import UsageError


def layout(**kw) -> GpuLayout:
    options = dict(nodes=2, nproc_per_node=None, gpus_per_node=None, available=0)
    options.update(kw)
    return resolve_gpu_layout(**options)


def test_no_gpus_means_the_gloo_variant_with_one_process_per_node():
    assert layout() == GpuLayout(0, 1, "gloo")
    assert layout(nproc_per_node=3) == GpuLayout(0, 3, "gloo")


def test_cpu_wins_even_on_a_gpu_host():
    assert layout(available=8, cpu=True) == GpuLayout(0, 1, "gloo")


def test_default_splits_all_gpus_evenly_one_process_per_gpu():
    assert layout(available=8) == GpuLayout(4, 4, "nccl")
    assert layout(nodes=3, available=8) == GpuLayout(2, 2, "nccl")


def test_processes_spanning_several_gpus():
    assert layout(available=8, nproc_per_node=2) == GpuLayout(4, 2, "nccl")


def test_backend_can_be_overridden():
    assert layout(available=2, backend="gloo") == GpuLayout(1, 1, "gloo")
    with pytest.raises(UsageError, match="--backend nccl needs GPUs"):
        layout(backend="nccl")


ALTERNATIVES = "use fewer nodes, fewer processes per node, --share-gpus, or --cpu for the Gloo variant"


@pytest.mark.parametrize("kw, message", [
    (dict(gpus_per_node=2, available=2),
     f"--nodes 2 x --gpus-per-node 2 needs 4 GPUs, but the engine has 2: {ALTERNATIVES}"),
    (dict(available=1), "1 GPU(s) cannot give 2 nodes a GPU each (NCCL refuses two nodes on one GPU): use --nodes 1 or"
                        " fewer, --share-gpus to share them, or --cpu"),
    (dict(available=4, nproc_per_node=3), "--nproc-per-node 3 is more than the 2 GPU(s) per node: each process needs"
                                          " its own GPU (NCCL refuses two ranks on one): use fewer processes per node,"
                                          " --share-gpus, or --cpu for the Gloo variant"),
    (dict(gpus_per_node=3, available=8, nproc_per_node=2), "--gpus-per-node 3 cannot be split evenly among 2 processes"
                                                           " that each span several GPUs: use a divisor of 3 for"
                                                           " --nproc-per-node"),
    # why this run has none, as it is: not an option the user never gave
    (dict(backend="nccl"), "--backend nccl needs GPUs, and this run has none: the engine has no GPUs (no NVIDIA"
                           " runtime in it); use --backend gloo"),
    (dict(backend="nccl", available=None), "--backend nccl needs GPUs, and this run has none: no GPUs are known here"
                                           " (no engine was asked); use --backend gloo"),
    (dict(backend="nccl", available=4, cpu=True), "--backend nccl needs GPUs, and this run has none: --cpu; use"
                                                  " --backend gloo, or drop --cpu"),
    (dict(share=True), "--share-gpus shares GPUs, and this run has none: the engine has no GPUs (no NVIDIA runtime in"
                       " it); drop --share-gpus"),
    (dict(share=True, available=4, gpus_per_node=0), "--share-gpus shares GPUs, and this run has none:"
                                                     " --gpus-per-node 0; drop --share-gpus, or drop --gpus-per-node 0"),
    (dict(gpus_per_node=3, available=2, share=True),
     "--gpus-per-node 3 is more than the 2 GPU(s) the engine has, even shared: ask for fewer"),
    # an engine with none: fewer nodes, processes or sharing would not help
    (dict(gpus_per_node=1, available=0, nodes=1), "--gpus-per-node 1 needs GPUs, and the engine has none (no NVIDIA"
                                                  " runtime in it): drop --gpus-per-node, or use --cpu for the Gloo"
                                                  " variant"),
    (dict(gpus_per_node=2, available=0, share=True), "--gpus-per-node 2 needs GPUs, and the engine has none (no NVIDIA"
                                                     " runtime in it): drop --gpus-per-node, or use --cpu for the Gloo"
                                                     " variant"),
])
def test_impossible_layouts_are_refused_with_the_alternatives(kw, message):
    with pytest.raises(UsageError) as refused:
        layout(**kw)
    assert str(refused.value) == message


def test_a_run_leases_the_first_free_gpus_and_a_refusal_names_who_holds_the_others():
    from orchestrate.config.gpu_layout import check_lease

    held = {"3": "run-b", "0": "run-a", "2": "run-a"}
    assert check_lease(2, ("0", "1", "2", "3", "4"), held) == ("1", "4")
    assert check_lease(1, ("0", "1"), {}) == ("0",)
    with pytest.raises(UsageError) as refused:
        check_lease(3, ("0", "1", "2", "3", "4"), held)
    assert str(refused.value) == ("3 GPU(s) wanted but only 2 of 5 are free: GPUs 0,2 are held by run run-a;"
                                  " GPUs 3 are held by run run-b"
                                  " (stop it with `python -m orchestrate stop RUN`, or ask for fewer)")


def test_unknown_availability_trusts_the_request():
    assert layout(gpus_per_node=1, available=None) == GpuLayout(1, 1, "nccl")


class InfoClient:
    def __init__(self, runtimes):
        self.runtimes = runtimes

    def info(self):
        return {"Runtimes": self.runtimes}


def test_an_engine_without_the_nvidia_runtime_has_no_gpus(monkeypatch):
    monkeypatch.setattr("orchestrate.engine.gpus.has_nvidia_cdi", lambda: False)
    assert detect_gpus(InfoClient({"runc": {}})) == GpuInventory()
    assert GpuInventory().count == 0


def test_the_nvidia_runtime_lists_the_host_gpus(monkeypatch):
    monkeypatch.setattr("orchestrate.engine.gpus.host_gpu_indices", lambda: ("0", "1"))
    inventory = detect_gpus(InfoClient({"runc": {}, "nvidia": {}}))
    assert inventory == GpuInventory("nvidia", ("0", "1")) and inventory.count == 2


def test_cdi_specs_for_nvidia_are_recognised(tmp_path):
    assert not has_nvidia_cdi((tmp_path,))
    (tmp_path / "nvidia.yaml").write_text("kind: nvidia.com/gpu\ndevices: []\n")
    assert has_nvidia_cdi((tmp_path,))


@pytest.mark.parametrize("options, layout_wanted", [
    (dict(share_gpus=True, nproc_per_node=2), (1, 2, "nccl", True)),  # one GPU, two nodes of two ranks: the recipe
    (dict(backend="nccl"), (1, 1, "nccl", False)),
])
def test_gpu_options_whose_count_is_the_engines_are_planned_on_a_gpu_host_not_refused_as_if_it_had_none(
        make_run, monkeypatch, options, layout_wanted):
    """--share-gpus, or --backend nccl, with no --gpus-per-node: the count is the engine's, so the
    check before the engine is asked leaves them to the plan that knows it. They were refused on
    every host: "this run has none: no GPUs are known here (no engine was asked)"."""
    from tests.fakes import FakeDockerClient

    client = FakeDockerClient()
    client.gpus = ("0",) if options.get("share_gpus") else ("0", "1")
    monkeypatch.setattr("orchestrate.engine.gpus.host_gpu_indices", lambda: client.gpus)
    plan = make_run(nodes=2, cpu=False, client=client, **options).dry_plan()
    config = plan.config
    assert (config.gpus_per_node, config.nproc_per_node, config.backend, config.share_gpus) == layout_wanted
    # an engine with none refuses them as none, naming the engine; with no engine, as unknown
    client.gpus = ()
    with pytest.raises(UsageError, match=r"this run has none: the engine has no GPUs \(no NVIDIA runtime in it\)"):
        make_run(nodes=2, cpu=False, client=client, **options).dry_plan()
    # and a run is refused so before its image is looked for or built (that may take minutes)
    asked = len(client.calls)
    with pytest.raises(UsageError, match=r"this run has none: the engine has no GPUs"):
        make_run(nodes=2, cpu=False, client=client, **options).start()
    assert not [call for call in client.calls[asked:] if "image" in call[0] or "build" in call[0]], client.calls[asked:]
