"""Run an nmt command under torchrun, with one-line errors: ``nmt launch [TORCHRUN OPTIONS] train CONFIG --resume``.

Everything before the nmt command goes to torchrun (``torch.distributed.run``: ``--standalone``,
``--nproc-per-node``, ``--nnodes``, ``--node-rank``, ``--master-addr``, ``--master-port``, ``--max-restarts``, ...),
everything from it on to ``nmt``. Nodes wait for each other at most ``--join-timeout`` seconds (default 300; torchrun's
own default is 600, set here as its rendezvous ``timeout``/``join_timeout`` unless ``--rdzv-conf`` is given): a node
that never joins ends the run with one line instead of torchrun's traceback, as does a worker that fails for good
(its own error line is printed above). Examples::

    nmt launch --standalone --nproc-per-node=2 --max-restarts=3 train gl-en-cpu --resume
    nmt launch --nnodes=2 --nproc-per-node=8 --node-rank=0 --master-addr=HOST --master-port=29500 train CONFIG --resume
"""

from __future__ import annotations

import argparse

from nmt.errors import NmtError

JOIN_TIMEOUT = 300  # seconds a node waits for the others
COMMANDS = ("train", "bench")  # the nmt commands that make sense under torchrun


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("torchrun", nargs=argparse.REMAINDER, metavar="...",
                        help="torchrun's options, then the nmt command and its arguments; --join-timeout SECONDS "
                             f"(default {JOIN_TIMEOUT}) bounds the wait for the other nodes")


def split(argv: list[str]) -> tuple[list[str], list[str], int]:
    """``(torchrun options, nmt command, join timeout)`` of ``nmt launch``'s arguments."""
    at = next((i for i, arg in enumerate(argv) if arg in COMMANDS), None)
    if at is None:
        raise NmtError("nmt launch: give torchrun's options, then the nmt command, e.g. `nmt launch "
                       "--standalone --nproc-per-node=2 train CONFIG --resume`")
    launcher, command = list(argv[:at]), list(argv[at:])
    timeout = JOIN_TIMEOUT
    for i, arg in enumerate(launcher):
        if arg == "--join-timeout" or arg.startswith("--join-timeout="):
            value = arg.split("=", 1)[1] if "=" in arg else (launcher[i + 1] if i + 1 < len(launcher) else "")
            if not value.isdigit() or int(value) <= 0:
                raise NmtError(f"nmt launch: --join-timeout {value!r} must be a positive number of seconds")
            timeout = int(value)
            del launcher[i: i + (1 if "=" in arg else 2)]
            break
    if not any(arg.startswith(("--rdzv-conf", "--rdzv_conf")) for arg in launcher):
        launcher += ["--rdzv-conf", f"timeout={timeout},join_timeout={timeout}"]
    return launcher, command, timeout


def run(args: argparse.Namespace) -> int:
    from torch.distributed import DistStoreError
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import RendezvousError
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    launcher, command, timeout = split(list(args.torchrun))
    options = get_args_parser().parse_args([*launcher, "-m", "nmt", *command])
    try:
        torchrun(options)
    except (DistStoreError, RendezvousError) as exc:
        detail = " ".join(str(exc).split())
        raise NmtError(f"nmt launch: not every node joined within {timeout} s ({detail[:200]}); start it on every "
                       "node with the same --nnodes, --master-addr and --master-port, or raise --join-timeout"
                       ) from None
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        raise NmtError(f"nmt launch: {command[0]} failed on global rank {rank} (exit code {failure.exitcode}) after "
                       f"{options.max_restarts} restarts; its error is above") from None
    return 0
