"""The workers' start-up hook under real torchrun: a script that names nccl gets gloo (the
opt-in shim) and trains; each local rank gets its own NCCL host id."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess

from tests.workers.conftest import ROOT, hooked_torchrun, host_env

JOB = ROOT / "tests" / "jobs" / "names_nccl.py"


def test_a_script_that_names_nccl_gets_gloo_and_each_rank_its_own_nccl_hostid(tmp_path):
    done = subprocess.run(hooked_torchrun(2, "--nccl-hostid-per-rank", "--nccl-as-gloo", "--", str(JOB)),
                          cwd=tmp_path, env=host_env(tmp_path), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = {rank: rest for rank, *rest in
            re.findall(r"rank (\d) backend (\S+) hostid (\S+) all_reduce ([\d.]+) grad ([\d.]+)", done.stdout)}
    host = socket.gethostname()
    # ranks 1 + 2 summed; the same gradient on both replicas (2 inputs of ones x 4 weights)
    assert seen == {"0": ["gloo", f"{host}-local0", "3", "8"], "1": ["gloo", f"{host}-local1", "3", "8"]}, done.stdout


def test_without_the_shim_the_script_asks_for_nccl(tmp_path):
    done = subprocess.run(hooked_torchrun(1, "--nccl-hostid-per-rank", "--", str(JOB)),
                          cwd=tmp_path, env=host_env(tmp_path), capture_output=True, text=True, timeout=240)
    if "backend nccl" in done.stdout:  # a GPU host: real NCCL
        return
    assert done.returncode != 0 and re.search(r"nccl|NCCL", done.stdout + done.stderr)


def test_a_scripts_uncaught_error_reads_as_under_python_with_no_frame_of_the_hook(tmp_path):
    script = tmp_path / "raises.py"
    script.write_text(
        "import torch\nimport torch.distributed as dist\n\n\n"
        "def load(step):\n"
        "    try:\n"
        "        dist.all_reduce(torch.ones(2), group='not a group')  # the recorder's wrapper is in this call\n"
        "    except Exception as exc:\n"
        "        raise ValueError(f'bad batch at step {step}') from exc\n\n\n"
        "dist.init_process_group('gloo')\n"
        "load(3)\n")
    debug = tmp_path / "debug"
    debug.mkdir()
    done = subprocess.run(hooked_torchrun(1, "--", str(script)), cwd=tmp_path, capture_output=True, text=True,
                          env=host_env(tmp_path, DDP_DEBUG_DIR=str(debug), PYTHONPATH=str(ROOT)), timeout=240)
    assert done.returncode != 0
    assert "exitcode  : 1 " in done.stderr  # an uncaught error's exit status, as under python3
    worker = "\n".join(line.removeprefix("[rank0]:") for line in done.stderr.splitlines() if line.startswith("[rank0]:"))
    tracebacks = worker.split("Traceback (most recent call last):")[1:]  # the worker's, not torchrun's own
    assert len(tracebacks) >= 2, done.stderr[-3000:]  # the errors it was raised from (torch's own chain), then its own
    for text in tracebacks:
        assert "orchestrate/node/" not in text and "runpy" not in text, text
    assert f'File "{script}", line 7, in load' in tracebacks[-2]
    assert f'File "{script}", line 13, in <module>' in tracebacks[-1]
    assert tracebacks[-1].rstrip().endswith("ValueError: bad batch at step 3")



def test_a_missing_file_the_script_opens_reads_as_under_python_through_the_hooks_wrappers_of_open(tmp_path):
    """``open`` is a builtin: it raises inside the wrappers (the storage faults', the shared
    writes'), with no frame of its own, and the error is still the script's."""
    script = tmp_path / "reads.py"
    script.write_text("def load(path):\n    with open(path) as f:\n        return f.read()\n\n\nload('/nonexistent/vocab.json')\n")
    progress = tmp_path / "progress"
    progress.mkdir()
    done = subprocess.run(hooked_torchrun(1, "--", str(script)), cwd=tmp_path, capture_output=True, text=True,
                          env=host_env(tmp_path, DDP_PROGRESS_DIR=str(progress), PYTHONPATH=str(ROOT)), timeout=240)
    assert "exitcode  : 1 " in done.stderr, done.stderr[-3000:]
    worker = re.split(r"^[EWI]\d{4} ", done.stderr, maxsplit=1, flags=re.M)[0]  # before torchrun's own report
    [traceback] = worker.split("Traceback (most recent call last):")[1:]
    assert "orchestrate/node/" not in traceback and "runpy" not in traceback, traceback
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', traceback)
    assert frames == [(str(script), "6", "<module>"), (str(script), "2", "load")], traceback
    assert traceback.rstrip().endswith("FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/vocab.json'")

def worker_stderr(tmp_path, script_text: str, name: str = "script.py") -> tuple[int, str]:
    """Run one worker of ``script_text`` under the hook: torchrun's exit code and what the worker wrote."""
    (tmp_path / name).write_text(script_text)
    done = subprocess.run(hooked_torchrun(1, "--", name), cwd=tmp_path, capture_output=True, text=True,
                          env=host_env(tmp_path, PYTHONPATH=str(ROOT)), timeout=240)
    # the worker's words come before torchrun's own report (its traceback, its ChildFailedError)
    worker = done.stderr.split("torch/distributed/run.py", 1)[0]
    return done.returncode, "\n".join(line for line in worker.splitlines() if not re.match(r"^[EWI]\d{4} ", line))


def test_a_syntax_error_a_missing_script_and_a_users_excepthook_end_as_under_python(tmp_path):
    code, said = worker_stderr(tmp_path, "x = (\n")
    assert code != 0 and "SyntaxError: '(' was never closed" in said and "worker_start.py" not in said, said
    done = subprocess.run(hooked_torchrun(1, "--", "nowhere.py"), cwd=tmp_path, capture_output=True, text=True,
                          env=host_env(tmp_path, PYTHONPATH=str(ROOT)), timeout=240)
    assert "can't open file" in done.stderr and "No such file or directory" in done.stderr
    assert "exitcode  : 2 " in done.stderr  # python3's status for it
    code, said = worker_stderr(tmp_path, (
        "import sys\n"
        "def hook(kind, value, tb):\n"
        "    print('hook:', sys.last_value is value, sys.exc_info()[0], file=sys.stderr)\n"
        "sys.excepthook = hook\n"
        "raise ValueError('x')\n"))
    assert "hook: True None" in said, said  # as python3 calls it: sys.last_* set, outside any handler


def test_a_worker_that_spawns_processes_of_its_own_is_told_once_that_torchrun_spawns_them_already(tmp_path):
    """The single-machine tutorial's mp.spawn under torchrun: its processes would wait for a
    store no one serves. The note comes as it starts them (here none, so the script ends)."""
    code, said = worker_stderr(tmp_path, (
        "import sys\n"
        "import torch.multiprocessing as mp\n"
        "def work(index):\n"
        "    pass\n"
        "module = sys.modules['torch.multiprocessing.spawn']  # mp.spawn is the function of that name\n"
        "print('wrapped:', hasattr(mp.start_processes, '__wrapped__'), mp.start_processes is module.start_processes,"
        " file=sys.stderr)\n"
        "mp.spawn(work, nprocs=0)\n"
        "mp.start_processes(work, nprocs=0)\n"))
    assert code == 0, said
    assert "wrapped: True True" in said  # both names torch gives it, as the script's import torch left them
    notes = [line for line in said.splitlines() if "with torch.multiprocessing under torchrun" in line]
    assert notes == ["[ddp-compose] rank 0 starts 0 processes of its own with torch.multiprocessing under torchrun,"
                     " which already starts one process per rank (1 in all): the processes it starts inherit torchrun's"
                     " store (TORCHELASTIC_USE_AGENT_STORE), so an init_process_group in them would wait for a store no"
                     " one serves; under torchrun call the worker function once, with RANK, LOCAL_RANK and WORLD_SIZE"
                     " from the environment, and leave MASTER_ADDR and MASTER_PORT as torchrun sets them"
                     " (docs/your-project.md#a-script-that-spawns-its-ranks)"], said
    assert "skipped" not in said  # the hook's own failure to install it would say so


def test_a_sampler_iterated_again_with_its_epoch_unset_and_the_init_call_are_reported_on_the_progress_channel(
        tmp_path):
    script = tmp_path / "epochs.py"
    script.write_text(
        "import torch\nimport torch.distributed as dist\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "from torch.utils.data.distributed import DistributedSampler\n\n"
        "dist.init_process_group('gloo')\n"
        "data = TensorDataset(torch.arange(16.0))\n"
        "sampler = DistributedSampler(data, shuffle=True)\n"
        "for epoch in range(3):\n"
        "    for batch in DataLoader(data, batch_size=4, sampler=sampler):\n"
        "        pass\n"
        "dist.destroy_process_group()\n")
    progress = tmp_path / "progress"
    progress.mkdir()
    done = subprocess.run(hooked_torchrun(2, "--", str(script)), cwd=tmp_path, capture_output=True, text=True,
                          env=host_env(tmp_path, DDP_PROGRESS_DIR=str(progress), PYTHONPATH=str(ROOT)), timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        records = [json.loads(line) for line in (progress / f"rank{rank}.jsonl").read_text().splitlines()]
        said = [(r["same_shuffle"], r["shuffle_epoch"]) for r in records if "same_shuffle" in r]
        assert said == [("epochs.py:10", 0)], records  # once, at the loop's line, as the work directory names it
        calls = [r["init_call"] for r in records if "init_call" in r]
        assert [(c["rank"], c["world_size"], c["via"], c["torchrun"]["rank"], c["torchrun"]["world_size"])
                for c in calls] == [(rank, 2, "env", rank, 2)], records
        assert calls[0]["store"] == calls[0]["torchrun"]["store"] != "", calls
        # the same call, said as it was made, before the group it made
        asked = [r["init_asked"] for r in records if "init_asked" in r]
        assert asked == calls and records.index(next(r for r in records if "init_asked" in r)) < records.index(
            next(r for r in records if "init_call" in r))



def test_each_torch_load_of_a_file_is_reported_once_per_worker_and_the_torch_save_before_it_as_one(tmp_path):
    """The chaos verdict's records of a resume: the save said as torch.save's, each file loaded
    said once with its rank, by its path or the path of the file object it came from (a stream
    as ""), and a load that failed said not at all; what torch.load returns and raises is the
    script's own."""
    script = tmp_path / "resume.py"
    script.write_text(
        "import io, os\n"
        "from orchestrate.node import shared_writes\n"
        "nodes_mount = shared_writes.under\n"
        "# the host has no /workspace: this directory stands for it\n"
        "shared_writes.under = lambda path, dirs: nodes_mount(path, (os.path.realpath(os.getcwd()), *dirs[1:]))\n"
        "import torch\n"
        "from torch import load\n"
        "torch.save({'step': 3}, 'ckpt.pt')\n"
        "torch.save({'step': 3}, 'model.pt')\n"
        "assert torch.load('ckpt.pt')['step'] == 3 and load('ckpt.pt')['step'] == 3\n"
        "with open('model.pt', 'rb') as handle:\n"
        "    assert torch.load(handle)['step'] == 3\n"
        "assert torch.load(io.BytesIO(open('ckpt.pt', 'rb').read()))['step'] == 3\n"
        "try:\n"
        "    torch.load('missing.pt')\n"
        "except FileNotFoundError:\n"
        "    print('missing raised', flush=True)\n"
        "torch.save({'w': 1}, os.path.join('..', 'elsewhere.pt'))\n"
        "assert torch.load(os.path.join('..', 'elsewhere.pt')) == {'w': 1}\n")
    progress = tmp_path / "progress"
    progress.mkdir()
    done = subprocess.run(hooked_torchrun(1, "--", str(script)), cwd=tmp_path, capture_output=True, text=True,
                          env=host_env(tmp_path, DDP_PROGRESS_DIR=str(progress), PYTHONPATH=str(ROOT)), timeout=240)
    assert done.returncode == 0 and "missing raised" in done.stdout, done.stderr[-3000:]
    records = [json.loads(line) for line in (progress / "rank0.jsonl").read_text().splitlines()]
    assert [(r["wrote"], r.get("torch_save")) for r in records if "wrote" in r] == [("ckpt.pt", True),
                                                                                   ("model.pt", True)], records
    elsewhere = os.path.realpath(tmp_path.parent / "elsewhere.pt")  # not in the work directory: named whole
    assert [(r["loaded"], r["rank"]) for r in records if "loaded" in r] == [
        ("ckpt.pt", 0), ("model.pt", 0), ("", 0), (elsewhere, 0)]


def test_each_dcp_load_is_reported_by_its_directory_and_rank_and_the_dcp_save_before_it_as_a_checkpoint(tmp_path):
    """A DCP job's resume, under torchrun --standalone on 2 ranks: dcp.save into ckpt/ said by
    each rank as a save of the directory (not as torch.save's of the files in it), dcp.load and the
    older load_state_dict said by their directory (the checkpoint_id, or the reader's path), not as
    the torch.load DCP makes of each tensor; what they load is the script's, and a load that
    failed is said not at all. A torch.save to a file opened to be written whole is torch.save's."""
    script = tmp_path / "resume.py"
    script.write_text(
        "import os\n"
        "from orchestrate.node import shared_writes\n"
        "nodes_mount = shared_writes.under\n"
        "# the host has no /workspace: this directory stands for it\n"
        "shared_writes.under = lambda path, dirs: nodes_mount(path, (os.path.realpath(os.getcwd()), *dirs[1:]))\n"
        "import torch\n"
        "import torch.distributed as dist\n"
        "import torch.distributed.checkpoint as dcp\n"
        "from torch.distributed.checkpoint import load\n"
        "dist.init_process_group('gloo')\n"
        "rank = dist.get_rank()\n"
        "dcp.save({'w': torch.full((4,), 3.0), 'step': 3}, checkpoint_id='ckpt')\n"
        "state = {'w': torch.zeros(4), 'step': 0}\n"
        "load(state, checkpoint_id='ckpt')\n"
        "assert state['w'].tolist() == [3.0] * 4 and state['step'] == 3, state\n"
        "older = {'w': torch.zeros(4), 'step': 0}\n"
        "dcp.load_state_dict(older, dcp.FileSystemReader('ckpt'))\n"
        "assert older['step'] == 3\n"
        "try:\n"
        "    dcp.load(state, checkpoint_id='missing')\n"
        "except BaseException:  # (DCP's CheckpointException)\n"
        "    print('missing raised', flush=True)\n"
        "with open(f'model{rank}.pt', 'wb') as handle:\n"
        "    torch.save({'step': 3}, handle)\n"
        "import time\n"
        "class SlowToFinish(dcp.FileSystemWriter):  # its .metadata written half a second after the call returned\n"
        "    def finish(self, metadata, results):\n"
        "        time.sleep(0.5)\n"
        "        return super().finish(metadata, results)\n"
        "dcp.async_save({'w': torch.ones(2)}, storage_writer=SlowToFinish('ckpt_async')).result()\n"
        "dist.destroy_process_group()\n")
    progress = tmp_path / "progress"
    progress.mkdir()
    done = subprocess.run(hooked_torchrun(2, "--", str(script)), cwd=tmp_path, capture_output=True, text=True,
                          env=host_env(tmp_path, DDP_PROGRESS_DIR=str(progress), PYTHONPATH=str(ROOT)), timeout=240)
    assert done.returncode == 0 and done.stdout.count("missing raised") == 2, done.stderr[-3000:]
    # the older entry point's deprecation is said at the script's line, not the hook's
    assert "resume.py:17: FutureWarning: `load_state_dict` is deprecated" in done.stderr
    assert "dcp_files" not in done.stderr
    for rank in (0, 1):
        records = [json.loads(line) for line in (progress / f"rank{rank}.jsonl").read_text().splitlines()]
        assert [r["dcp_saved"] for r in records if "dcp_saved" in r] == ["ckpt", "ckpt_async"], records
        # an async_save is said once written (by its thread's save), not as it starts
        [async_saved] = [r["time"] for r in records if r.get("dcp_saved") == "ckpt_async"]
        assert async_saved >= (tmp_path / "ckpt_async" / ".metadata").stat().st_mtime - 0.05, records
        assert [(r["loaded"], r.get("dcp"), r["rank"]) for r in records if "loaded" in r] == [("ckpt", True, rank)]
        saves = [(r["wrote"], r.get("torch_save")) for r in records if r.get("torch_save")]
        assert saves == [(f"model{rank}.pt", True)], records  # not the files of ckpt/ DCP wrote with it
