"""MNIST for the workers: the real download, or a small learnable MNIST-format stand-in.

The stand-in is written as the IDX files torchvision's ``MNIST`` reads
(``<root>/MNIST/raw/train-images-idx3-ubyte`` ...), so the real loader is used either way;
tests and air-gapped users get data without a network.
"""
from __future__ import annotations

import os
import shutil
import struct
import tempfile
from pathlib import Path

import torch

IMAGE_SIZE = 28
NUM_CLASSES = 10
RAW_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def raw_dir(root: Path) -> Path:
    """Where torchvision's MNIST looks for its (uncompressed) IDX files."""
    return Path(root) / "MNIST" / "raw"


def has_mnist(root: Path) -> bool:
    """Whether ``root`` already holds the four IDX files."""
    folder = raw_dir(root)
    return all((folder / name).is_file() for pair in RAW_FILES.values() for name in pair)


# Beside synthetic IDX files: they are the stand-in, not MNIST (--data download must not take them).
SYNTHETIC_MARK = "SYNTHETIC"


def has_synthetic_mnist(root: Path) -> bool:
    """Whether ``root`` holds the synthetic stand-in that :func:`write_synthetic_mnist` wrote."""
    return has_mnist(root) and (raw_dir(root) / SYNTHETIC_MARK).is_file()


def write_idx_images(path: Path, images: torch.Tensor) -> None:
    """Write uint8 images (N, 28, 28) in the IDX3 format (magic 2051, big-endian sizes)."""
    n, rows, cols = images.shape
    with open(path, "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, rows, cols))
        f.write(images.to(torch.uint8).contiguous().numpy().tobytes())


def write_idx_labels(path: Path, labels: torch.Tensor) -> None:
    """Write uint8 labels (N,) in the IDX1 format (magic 2049)."""
    with open(path, "wb") as f:
        f.write(struct.pack(">II", 2049, labels.numel()))
        f.write(labels.to(torch.uint8).contiguous().numpy().tobytes())


def class_templates(seed: int = 0) -> torch.Tensor:
    """One 28x28 pattern per class: a few soft strokes at fixed, class-specific places."""
    g = torch.Generator().manual_seed(seed)
    ys, xs = torch.meshgrid(torch.arange(IMAGE_SIZE), torch.arange(IMAGE_SIZE), indexing="ij")
    templates = torch.zeros(NUM_CLASSES, IMAGE_SIZE, IMAGE_SIZE)
    for k in range(NUM_CLASSES):
        for _ in range(4):
            cy, cx = (torch.rand(2, generator=g) * 16 + 6).tolist()
            sy, sx = (torch.rand(2, generator=g) * 4 + 1.5).tolist()
            blob = torch.exp(-(((ys - cy) / sy) ** 2 + ((xs - cx) / sx) ** 2) / 2)
            templates[k] = torch.maximum(templates[k], blob)
    return templates


def synthesize(count: int, seed: int, templates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` noisy, randomly shifted copies of the class templates, with their labels."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, NUM_CLASSES, (count,), generator=g)
    images = templates[labels].clone()
    shifts = torch.randint(-2, 3, (count, 2), generator=g)
    for i in range(count):
        images[i] = torch.roll(images[i], shifts=tuple(shifts[i].tolist()), dims=(0, 1))
    images = images * 200 + torch.randn(images.shape, generator=g) * 30
    return images.clamp(0, 255).round().to(torch.uint8), labels.to(torch.uint8)


def write_synthetic_mnist(root: Path, train_size: int = 2048, test_size: int = 512, seed: int = 0) -> None:
    """Write a learnable MNIST-format dataset under ``root`` atomically.

    Files go to a temporary directory beside the target first, which is then renamed into
    place, so a reader never sees half a dataset and two writers cannot interleave.
    """
    target = raw_dir(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    templates = class_templates(seed)
    staging = Path(tempfile.mkdtemp(prefix=".raw-", dir=target.parent))
    try:
        for split, size, split_seed in (("train", train_size, seed + 1), ("test", test_size, seed + 2)):
            images, labels = synthesize(size, split_seed, templates)
            image_file, label_file = RAW_FILES[split]
            write_idx_images(staging / image_file, images)
            write_idx_labels(staging / label_file, labels)
            for name in (image_file, label_file):
                with open(staging / name, "rb") as f:
                    os.fsync(f.fileno())
        (staging / SYNTHETIC_MARK).write_text("synthetic MNIST-format data of app.mnist_data, not MNIST\n")
        try:
            os.rename(staging, target)
        except OSError:
            if not has_mnist(root):  # someone else's complete copy is fine; anything else is not
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def prepare_mnist(root: Path, source: str, train_size: int = 2048, test_size: int = 512) -> str:
    """Make sure ``root`` holds MNIST; return what was done.

    Args:
        root: The data directory.
        source: ``"download"`` (torchvision's real download) or ``"synthetic"``.
    """
    if has_synthetic_mnist(root):
        return f"found synthetic MNIST in {root}"
    if has_mnist(root):
        return f"found MNIST in {root}"
    if source == "synthetic":
        write_synthetic_mnist(root, train_size, test_size)
        return f"wrote synthetic MNIST ({train_size} train / {test_size} test) to {root}"
    from torchvision.datasets import MNIST

    for train in (True, False):
        MNIST(str(root), train=train, download=True)
    return f"downloaded MNIST to {root}"
