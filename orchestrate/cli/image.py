"""``image build``: the node image, from an official base or offline."""
from __future__ import annotations

import argparse
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import argparse_type
from orchestrate.config.options import image_tag
from orchestrate.config.run_config import DEFAULT_IMAGE
from orchestrate.config.torch_versions import DEFAULT_TORCH, torchvision_for
from orchestrate.errors import UsageError


def add_parsers(sub: Any) -> None:
    image = sub.add_parser("image", help="manage the node image")
    image_sub = image.add_subparsers(dest="image_command", metavar="ACTION", parser_class=type(image))
    build = image_sub.add_parser("build", help="build the node image",
                                 description="Build docker/Dockerfile from an official base image, or offline"
                                             " (debootstrap base + host wheelhouse) when the base cannot be pulled.",
                                 epilog="usage example: python -m orchestrate image build --torch 2.14.1"
                                        " (tagged ddp-compose-node:torch-2.14.1; run it with --image)")
    build.add_argument("--torch", default=DEFAULT_TORCH, metavar="VERSION",
                       help=f"torch release to install, with its matching torchvision (default: {DEFAULT_TORCH},"
                            " the release the exit-soundness benchmark proved sound)")
    build.add_argument("--image", default=None, type=argparse_type(image_tag, "--image"),
                       help=f"tag to build (default: {DEFAULT_IMAGE} for torch {DEFAULT_TORCH}, else"
                            " ddp-compose-node:torch-VERSION)")
    build.add_argument("--base-image", default=None, help="official base image (default: python:3.11-slim-bookworm)")
    mode = build.add_mutually_exclusive_group()
    mode.add_argument("--offline", action="store_true",
                      help="skip the pull: debootstrap a base and install from a host wheelhouse")
    mode.add_argument("--online", action="store_true", help="never fall back to the offline path")
    build.add_argument("--if-missing", action="store_true", help="do nothing when the image already exists, built by this checkout's recipe")
    image_sub.add_parser("prune", help="remove the derived images no container uses",
                         description="Remove the images --requirements and a Dockerfile derived from the node image"
                                     " (ddp-compose-user:<digest>) that no container uses, a stopped run's included:"
                                     " each change of their inputs leaves the image built before it. The node image"
                                     " itself stays.",
                         epilog="usage example: python -m orchestrate prune && python -m orchestrate image prune")
    image.set_defaults(handler=command, image_parser=image)


def image_tag_for(torch_version: str) -> str:
    """The tag ``image build --torch VERSION`` uses when no --image is given."""
    if torch_version == DEFAULT_TORCH:
        return DEFAULT_IMAGE
    return f"{DEFAULT_IMAGE.rpartition(':')[0]}:torch-{torch_version}"  # (a registry's port is not the tag)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    """``image build``: build the node image by the official or the offline path; ``image
    prune``: remove the derived images no container uses."""
    from orchestrate.engine.images import DEFAULT_CPU_BASE, build_node_image, image_current

    if args.image_command == "prune":
        return prune(inv)
    if args.image_command != "build":
        raise UsageError("image needs an ACTION: build or prune (see python -m orchestrate image --help)")
    torchvision_for(args.torch)  # a bad version is refused before the engine is asked
    if args.offline and args.base_image:
        raise UsageError(f"--base-image {args.base_image} is the official path's base: --offline builds on a base"
                         " of its own, made from this machine's packages")
    tag = args.image or image_tag_for(args.torch)
    client = inv.engine()
    if args.if_missing and image_current(client, tag):
        inv.out.write(f"node image {tag} already exists\n")
        return 0
    offline = True if args.offline else (False if args.online else None)
    # one write a line: the base and the wheel download report from two threads
    build_node_image(client, tag, torch_version=args.torch, base_image=args.base_image or DEFAULT_CPU_BASE,
                     offline=offline, progress=lambda s: print(f"[image] {s}\n", end="", file=inv.out, flush=True))
    if tag != DEFAULT_IMAGE:
        inv.out.write(f"run jobs on it with: python -m orchestrate run --image {tag} ...\n")
    return 0


def prune(inv: Invocation) -> int:
    """``image prune``: say each derived image removed, or that there was none to remove."""
    from orchestrate.engine.user_image import remove_unused_derived_images

    removed = remove_unused_derived_images(inv.engine(), inv.say)
    for tag in removed:
        inv.out.write(f"removed {tag}\n")
    inv.out.write(f"removed {len(removed)} derived image(s) no container uses\n" if removed
                  else "no derived image to remove: none exists, or a container uses each\n")
    return 0
