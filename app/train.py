"""MNIST training across ranks: the CNN with BatchNorm of the DDP MNIST walkthrough.

    torchrun --standalone --nproc-per-node 2 -m app.train --epochs 2 --data synthetic

- Data: torchvision's MNIST from --data-dir, prepared once per run by global rank 0 (real
  download, or --data synthetic: a small learnable set in MNIST's own IDX format) while the
  others wait; DistributedSampler with set_epoch; --batch-size is per rank.
- Gradient synchronisation (--sync): ddp (DistributedDataParallel), allreduce (one
  all_reduce per parameter after backward), butterfly (a hand-written butterfly
  all-reduce). All three reach the same parameters.
- --emulate-world-size W (with one process): train on the concatenation of the batches W
  ranks would see, each share normalised on its own as DDP's per-replica BatchNorm does;
  the reference the distributed modes must match.
- Checkpoints: after every epoch rank 0 saves model, optimizer, epoch/step and every rank's
  RNG state atomically to --checkpoint-dir; --resume continues from the latest one.
- Checks: test accuracy across ranks each epoch; at the end every replica must be
  identical and accuracy at least --min-accuracy, else the exit code is 1.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Iterator, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, Subset
from torch.utils.data.distributed import DistributedSampler

from app.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from app.distenv import (
    WorkerEnv,
    add_timeout_option,
    log0,
    non_negative_float,
    non_negative_int,
    positive_int,
    process_group,
    refuse,
    report_resumed,
    report_step,
    select_device,
)
from app.gradsync import average_gradients, butterfly_average_gradients
from app.mnist_data import has_synthetic_mnist, prepare_mnist, raw_dir
from app.toy import parameter_checksum, replicas_agree

SYNC_MODES = ("ddp", "allreduce", "butterfly")


class Net(nn.Module):
    """conv(32)-BN-relu-pool, conv(64)-BN-relu-pool, fc(128)-relu, fc(10), log-softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, kernel_size=3, stride=1)
        self.n1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3, stride=1)
        self.n2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(1600, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.n1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.n2(self.conv2(x))), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return F.log_softmax(self.fc2(x), dim=-1)


def mnist(root: Path, train: bool) -> Dataset:
    from torchvision import datasets, transforms

    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    return datasets.MNIST(str(root), train=train, download=False, transform=transform)


def resume_notes(state: dict, world: int, batch_size: int) -> list[str]:
    """What a resume cannot continue exactly, said rather than done silently: the checkpoint's
    step counts batches of its own size and world, and each rank's random state is its own."""
    notes = []
    saved_world, saved_batch = state.get("world_size"), state.get("batch_size")
    if saved_batch is not None and saved_batch != batch_size:
        notes.append(f"the checkpoint was made with --batch-size {saved_batch}, this run has {batch_size}: the"
                     f" {state['step']} step(s) it skips are batches of {batch_size}, so the data it goes on"
                     " from is not where the checkpoint left off")
    if saved_world is not None and saved_world != world:
        notes.append(f"the checkpoint was made by {saved_world} rank(s), this run has {world}: each rank's"
                     " random state starts afresh, and the data it goes on from is not where the checkpoint"
                     " left off")
    return notes


def prepare_data(args: argparse.Namespace, env: WorkerEnv) -> None:
    """Prepare the dataset once (rank 0, or local rank 0 of each node), the others wait."""
    if args.data == "download" and has_synthetic_mnist(args.data_dir):  # (every rank: each refuses alike)
        raw = raw_dir(args.data_dir)
        refuse(f"--data download: {raw} holds the synthetic stand-in (an earlier --data synthetic, or auto without"
               f" a network, wrote it); remove {raw.parent}, or give another --data-dir")
    preparer = env.local_rank == 0 if args.prepare_per_node else env.rank == 0
    if preparer:
        if args.data == "auto":
            try:
                print(prepare_mnist(args.data_dir, "download"), flush=True)
            except Exception as exc:  # no network: say so, and train on the stand-in
                print(f"MNIST download failed ({str(exc).splitlines()[0][:100]});"
                      " using synthetic MNIST-format data instead", flush=True)
                print(prepare_mnist(args.data_dir, "synthetic", args.train_size, args.test_size), flush=True)
        else:
            print(prepare_mnist(args.data_dir, args.data, args.train_size, args.test_size), flush=True)
    dist.barrier()


def train_loader(dataset: Dataset, args: argparse.Namespace, replicas: int, rank: int) -> tuple[DataLoader, DistributedSampler]:
    sampler = DistributedSampler(dataset, num_replicas=replicas, rank=rank, shuffle=True, seed=args.seed)
    return DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers), sampler


def evaluate(model: nn.Module, dataset: Dataset, device: torch.device, args: argparse.Namespace) -> tuple[int, int]:
    """Correct predictions and count over the whole test set, each rank scoring its share."""
    rank, world = dist.get_rank(), dist.get_world_size()
    shard = Subset(dataset, range(rank, len(dataset), world))  # no padding: every sample once
    model.eval()
    totals = torch.zeros(2, dtype=torch.float64, device=device)
    with torch.no_grad():
        for x, y in DataLoader(shard, batch_size=256):
            pred = model(x.to(device)).argmax(dim=1)
            totals[0] += (pred == y.to(device)).sum()
            totals[1] += y.numel()
    model.train()
    dist.all_reduce(totals)
    return int(totals[0].item()), int(totals[1].item())


def global_batches(dataset: Dataset, args: argparse.Namespace, epoch: int) -> Iterator[list]:
    """For --emulate-world-size W: each step yields the W batches the W ranks would see."""
    loaders = []
    for r in range(args.emulate_world_size):
        loader, sampler = train_loader(dataset, args, args.emulate_world_size, r)
        sampler.set_epoch(epoch)
        loaders.append(loader)
    yield from zip(*loaders)


def main_process_loop(args: argparse.Namespace, env: WorkerEnv, device: torch.device) -> int:
    """Train, evaluate, checkpoint; return the exit code (0 only when every check passes)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.emulate_world_size and world != 1:
        refuse("--emulate-world-size trains the reference in one process: use --nproc-per-node 1")
    if args.sync_bn and device.type == "cpu":
        refuse("--sync-bn needs GPUs: torch's SyncBatchNorm does not run on the CPU")
    prepare_data(args, env)
    train_set, test_set = mnist(args.data_dir, True), mnist(args.data_dir, False)

    torch.manual_seed(args.seed)
    model = Net().to(device)
    if args.sync_bn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    if args.sync == "ddp" and not args.emulate_world_size:
        # The knobs that are safe here (see docs/bench.md for their figures): gradients as views
        # into DDP's buckets (no copies; the optimizer and zero_grad(set_to_none) are fine with
        # them), and a static graph (every parameter is used in every step). Buffers are still
        # broadcast: per-replica BatchNorm keeps running statistics rank 0's broadcast equalises.
        net: nn.Module = DDP(model, device_ids=[device.index] if device.type != "cpu" else None,
                             gradient_as_bucket_view=True, static_graph=True)
    else:
        net = model
        for tensor in model.state_dict().values():  # same start everywhere, as DDP guarantees
            dist.broadcast(tensor, src=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    start_epoch, step = 0, 0
    if args.resume:
        path = latest_checkpoint(args.checkpoint_dir)
        if path is None:
            log0(f"--resume: no checkpoint in {args.checkpoint_dir}; starting from scratch")
        else:
            state = load_checkpoint(path, device)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start_epoch, step = state["epoch"], state["step"]
            if state.get("world_size") == world:
                torch.set_rng_state(state["rng"][rank].cpu())
            log0(f"resumed from {path} (epoch {start_epoch}, step {step})")
            for note in resume_notes(state, world, args.batch_size):
                log0(f"--resume: {note}")
            report_resumed(step)

    loader, sampler = train_loader(train_set, args, world, rank)
    steps_per_epoch = len(loader)
    accuracy = None
    last_log = time.perf_counter()

    def checkpoint(epoch_to_continue: int) -> None:
        """Save where training continues: an epoch, and the global step (maybe mid-epoch)."""
        rng = [None] * world
        dist.all_gather_object(rng, torch.get_rng_state())
        save_checkpoint(args.checkpoint_dir, f"step-{step:07d}.pt", {
            "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "epoch": epoch_to_continue, "step": step, "rng": rng, "world_size": world,
            "batch_size": args.batch_size,
        })

    for epoch in range(start_epoch, args.epochs):
        epoch_started = time.perf_counter()
        sampler.set_epoch(epoch)
        # Resuming mid-epoch: the sampler's order is fixed by seed and epoch, so skipping the
        # batches already trained continues exactly where the checkpoint left off.
        skip = max(0, step - epoch * steps_per_epoch)
        batches = global_batches(train_set, args, epoch) if args.emulate_world_size else ([b] for b in loader)
        samples, loss_sum, batch_count = 0, 0.0, 0
        for i, shares in enumerate(batches):
            if i < skip:
                continue
            if args.max_steps and step >= args.max_steps:
                break
            optimizer.zero_grad()
            # One share per (emulated) replica; the loss is their mean, as DDP's gradient is.
            losses = [F.nll_loss(net(x.to(device)), y.to(device)) for x, y in shares]
            loss = torch.stack(losses).mean()
            loss.backward()
            if args.sync == "allreduce":
                average_gradients(model)
            elif args.sync == "butterfly":
                butterfly_average_gradients(model)
            optimizer.step()
            step += 1
            samples += sum(len(y) for _, y in shares) * world
            loss_sum, batch_count = loss_sum + loss.item(), batch_count + 1
            report_step(step, loss=loss.item())
            now = time.perf_counter()
            if now - last_log >= args.log_interval:
                log0(f"step {step} (epoch {epoch + 1}/{args.epochs}, batch {i + 1}/{steps_per_epoch})"
                     f" loss {loss.item():.4f} ({samples / (now - epoch_started):.0f} samples/s)")
                last_log = now
            if args.checkpoint_every and step % args.checkpoint_every == 0 and i + 1 < steps_per_epoch:
                checkpoint(epoch)
        correct, total = evaluate(model, test_set, device, args)
        accuracy = correct / total
        log0(f"epoch {epoch + 1}/{args.epochs} done: train loss {loss_sum / max(batch_count, 1):.4f},"
             f" test accuracy {accuracy:.2%} ({correct}/{total}),"
             f" {time.perf_counter() - epoch_started:.1f} s")
        checkpoint(epoch + 1 if step >= (epoch + 1) * steps_per_epoch else epoch)
        if args.stop_after_epoch and epoch + 1 >= args.stop_after_epoch and epoch + 1 < args.epochs:
            log0(f"stopping after epoch {epoch + 1} as asked (--stop-after-epoch); resume with --resume")
            return 0
        if args.max_steps and step >= args.max_steps:
            break

    checksum = parameter_checksum(model)
    print(f"param_checksum rank={rank} value={checksum:.12f}", flush=True)
    agree = replicas_agree(checksum, device)
    if rank == 0 and args.save_params:
        torch.save({k: v.detach().cpu() for k, v in model.named_parameters()}, args.save_params)
    ok_accuracy = accuracy is None or accuracy >= args.min_accuracy
    log0(f"finished at step {step}: replicas {'identical' if agree else 'DIFFER'},"
         + (" test accuracy not checked: no epoch ended in this run" if accuracy is None
            else f" test accuracy {accuracy:.2%} (required {args.min_accuracy:.0%})")
         + f" -> {'OK' if agree and ok_accuracy else 'CHECK FAILED'}")
    return 0 if agree and ok_accuracy else 1


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="app.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=non_negative_int, default=2, help="epochs to train (default: 2)")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="batch size per rank (default: 32)")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default: 0.05)")
    parser.add_argument("--momentum", type=float, default=0.5, help="SGD momentum (default: 0.5)")
    parser.add_argument("--seed", type=int, default=1234, help="seed of weights and data order")
    parser.add_argument("--sync", choices=SYNC_MODES, default="ddp",
                        help="gradient synchronisation: ddp, allreduce or butterfly (default: ddp)")
    parser.add_argument("--sync-bn", action="store_true", help="SyncBatchNorm (GPUs only)")
    parser.add_argument("--data", choices=("auto", "download", "synthetic"), default="auto",
                        help="auto: download MNIST, else synthetic; download; synthetic (default: auto)")
    parser.add_argument("--data-dir", type=Path, default=Path("data"),
                        help="dataset directory, shared by the ranks (default: ./data)")
    parser.add_argument("--prepare-per-node", action="store_true",
                        help="local rank 0 of every node prepares the data (no shared data dir)")
    parser.add_argument("--train-size", type=positive_int, default=2048, help="synthetic training samples")
    parser.add_argument("--test-size", type=positive_int, default=512, help="synthetic test samples")
    parser.add_argument("--workers", type=non_negative_int, default=0, help="DataLoader workers per rank")
    # In the work directory, as the tutorials keep theirs: the checkpoints a run may resume from
    # must outlive it (ddp-compose's shared volume goes with every run's teardown).
    parser.add_argument("--checkpoint-dir", type=Path, default=Path("checkpoints") / "train",
                        help="where rank 0 saves checkpoints, shared by the ranks (default: ./checkpoints/train,"
                             " in the work directory, which every node mounts)")
    parser.add_argument("--checkpoint-every", type=non_negative_int, default=0, metavar="STEPS",
                        help="also checkpoint every STEPS steps within an epoch (default: 0, per epoch only)")
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    parser.add_argument("--stop-after-epoch", type=non_negative_int, default=0,
                        help="stop (exit 0) after this epoch's checkpoint, to be resumed")
    parser.add_argument("--max-steps", type=non_negative_int, default=0, help="stop after this many steps in all")
    parser.add_argument("--emulate-world-size", type=int, default=0, metavar="W",
                        help="one process trains on the concatenated batches of W ranks (reference)")
    parser.add_argument("--save-params", type=Path, help="rank 0 saves the final parameters here")
    parser.add_argument("--min-accuracy", type=float, default=0.5,
                        help="fail unless the final test accuracy reaches this (default: 0.5)")
    parser.add_argument("--log-interval", type=non_negative_float, default=2.0, help="seconds between progress lines")
    add_timeout_option(parser)
    return parser.parse_args(argv)


@record
def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    env = WorkerEnv.from_environ()
    device = select_device(env.local_rank)
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    with process_group(device, args.timeout) as backend:
        log0(f"MNIST training: world size {env.world_size}, backend {backend}, device {device.type},"
             f" sync {args.sync}, batch {args.batch_size}/rank")
        return main_process_loop(args, env, device)


if __name__ == "__main__":
    sys.exit(main())
