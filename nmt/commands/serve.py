"""Serve a trained model over HTTP: ``POST /translate`` (JSON), ``GET /health``, and a web page at ``/``.

    nmt serve --checkpoint runs/gl-en-cpu/checkpoint_best.pt --port 8080
    curl -s localhost:8080/translate -H 'Content-Type: application/json' -d '{"text": ["Ola mundo ."]}'

Sentences of requests that arrive within a few milliseconds of each other decode as one batch (``--window-ms``), in
decoding processes, never in the process that answers HTTP: by default on a CPU one process per core (at most 8),
each taking the next batch as soon as its own is done (faster than one process on every core at 1, 8 and 64
clients: docs/usage.md, "Serving a model"); ``--workers N`` sets the count, ``--workers 1`` one process on every
core. The service binds to loopback unless ``--host`` says otherwise; SIGTERM (or Ctrl-C) stops accepting, answers
what is in flight, and exits 0. It needs the ``serve`` extra (``pip install 'qknorm-nmt[serve]'``: Starlette and
uvicorn).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from nmt.commands import add_checkpoints, checkpoint_paths
from nmt.config import DecodeConfig, TrainConfig, choices
from nmt.errors import NmtError
from nmt.serve.batcher import HOLD

if TYPE_CHECKING:
    import torch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_checkpoints(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s, loopback only)")
    parser.add_argument("--port", type=int, default=8080, help="port (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=None,
                        help="batches decoded at a time, each in a decoding process of one core, independently "
                             "(default on a CPU: one per core, the intra-op thread count, at most 8; on a GPU: 1); 1 "
                             "on a CPU: one process on every core")
    parser.add_argument("--device", choices=choices(TrainConfig, "device"), default="auto")
    parser.add_argument("--precision", choices=choices(DecodeConfig, "precision"), default=None,
                        help="decoding arithmetic (default: the checkpoint's decode.precision)")
    parser.add_argument("--beam", type=int, help="default beam of requests that give none (default: decode.beam)")
    parser.add_argument("--max-sentences", type=int, default=64, help="sentences per request at most (%(default)s)")
    parser.add_argument("--max-chars", type=int, default=1000, help="characters per sentence at most (%(default)s)")
    parser.add_argument("--max-body", type=int, default=1_000_000, help="request body bytes at most (%(default)s)")
    parser.add_argument("--max-beam", type=int, default=16, help="largest beam or nbest a request may ask")
    parser.add_argument("--window-ms", type=float, default=5.0,
                        help="how long a batch waits for the next request before it decodes; a burst gathers for "
                             "ten windows at most (default: %(default)s)")
    parser.add_argument("--hold-ms", type=float, default=1000 * HOLD,
                        help="beside a busy decoding process, a free one takes the waiting sentences of the most "
                             "similar lengths and leaves the others, each for at most this long (more sentences/s, "
                             "a longer latency tail); 0: every waiting sentence decodes at once (default: "
                             "%(default)s)")
    parser.add_argument("--name", help="the model's name on the page and in answers (default: the checkpoint's "
                                       "file and folder)")


DEFAULT_MAX_WORKERS = 8  # each decoding process holds a model replica and its own torch (~0.4 GB beside the first)


def default_workers(device: torch.device) -> int:
    """One decoding process per core on a CPU (the intra-op thread count; measured faster than one process on
    every core at 1, 8 and 64 clients: docs/usage.md, "Serving a model"), at most :data:`DEFAULT_MAX_WORKERS` so a
    many-core machine does not hold a replica per core unasked; one on a GPU, which decodes in the service's
    process."""
    import torch

    return min(torch.get_num_threads(), DEFAULT_MAX_WORKERS) if device.type == "cpu" else 1


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from nmt.serve.app import ServiceOptions, build_app
    except ImportError as exc:
        raise NmtError(f"nmt serve needs the serve extra ({exc.name} is missing): pip install "
                       "'qknorm-nmt[serve]'") from None
    from nmt.inference.request import DecodeRequest, call_settings
    from nmt.inference.translator import Translator
    from nmt.serve.requests import Limits

    if args.workers is not None:
        DecodeRequest(workers=args.workers)  # a bad --workers fails before the model loads
    for flag in ("max_sentences", "max_chars", "max_body", "max_beam", "port"):
        if getattr(args, flag) < (0 if flag == "port" else 1):
            raise NmtError(f"--{flag.replace('_', '-')} {getattr(args, flag)} must be at least 1")
    for flag in ("window_ms", "hold_ms"):
        if getattr(args, flag) < 0:
            raise NmtError(f"--{flag.replace('_', '-')} {getattr(args, flag)} must be >= 0")
    paths = checkpoint_paths(args)
    translator = Translator.from_checkpoints(paths, args.device, args.precision)
    settings = call_settings(translator.config.decode, beam=args.beam)
    name = args.name or " + ".join(f"{Path(p).parent.name}/{Path(p).name}" for p in paths)
    workers = args.workers or default_workers(translator.runtime.device)
    options = ServiceOptions(name, settings, Limits(args.max_sentences, args.max_chars, args.max_body, args.max_beam),
                             workers, args.window_ms / 1000, hold=args.hold_ms / 1000)
    translator.worker_processes(workers, isolated=True)  # started now: the first request waits for no start-up
    app = build_app(translator, options)
    print(f"serving {name} ({translator.runtime.describe_precision()}) on http://{args.host}:{args.port}",
          file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", lifespan="on",
                                           access_log=False))
    # uvicorn stops gracefully on SIGTERM/SIGINT, then raises the signal again for the handlers it found: these
    # record it instead of killing the process, so a graceful stop exits 0
    stopped_by: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, frame: stopped_by.append(number))
    server.run()
    if stopped_by:
        print(f"stopped by {signal.Signals(stopped_by[0]).name}: every request accepted was answered", file=sys.stderr)
    if not server.started:
        raise NmtError(f"could not serve on {args.host}:{args.port} (in use, or not an address of this machine)")
    return 0
