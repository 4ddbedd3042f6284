"""The service's routes (Starlette): ``POST /translate``, ``GET /health`` and ``GET /`` (the page).

Every answer is JSON except the page; every refusal is a 4xx with ``{"error": "one line naming the field"}``, a batch
whose decoding failed answers 503 for the requests it held, and anything unexpected a 500 with a one-line error (the
traceback goes to the service's stderr, never to a client).
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from nmt.config import DecodeConfig
from nmt.inference.request import DecodeRequest, call_settings
from nmt.inference.translator import Translator
from nmt.machine.hardware import describe_machine, machine_info
from nmt.serve.batcher import HOLD, DecodingFailed, DynamicBatcher, Hypotheses
from nmt.serve.page import render
from nmt.serve.requests import ApiError, Limits, TranslationRequest, parse_request


@dataclass(frozen=True)
class ServiceOptions:
    """How the service decodes and what it accepts (``nmt serve``'s flags)."""

    name: str
    settings: DecodeConfig  # the model's decode section with the service's defaults (e.g. --beam)
    limits: Limits = Limits()
    workers: int = 1
    window: float = 0.005  # seconds the batcher waits for more requests after the first
    max_batch: int = 256  # sentences gathered into one batch at most
    hold: float = HOLD  # seconds a sentence may wait for a batch of similar lengths (0: never held)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) as soon as it passes ``limit`` bytes, whatever Content-Length says."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body: {declared} bytes, over the limit of {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"request body: over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def decode_request(pretokenized: bool, workers: int) -> DecodeRequest:
    """How the service decodes a lane's batch: in its decoding processes, never in the event loop's process (one
    process with every intra-op thread for one worker; else ``workers`` processes of one thread, one per lane of
    :class:`~nmt.serve.batcher.DynamicBatcher`: a batch fits one token budget, so it is one job for one process)."""
    return DecodeRequest(pretokenized, None, workers, isolated=True)


def build_app(translator: Translator, options: ServiceOptions) -> Starlette:
    """The service for ``translator`` (which it closes when the service stops)."""
    settings = options.settings

    def translate(lines: Sequence[str], key: tuple[bool, int | None, int | None]) -> Hypotheses:
        pretokenized, beam, nbest = key
        call = call_settings(settings, beam=beam, nbest=nbest)
        return translator.translate(lines, settings=call, request=decode_request(pretokenized, options.workers))

    batcher = DynamicBatcher(translate, options.window, options.max_batch, lanes=options.workers,
                             hold=options.hold)
    precision = translator.runtime.describe_precision()

    def check_options(request: TranslationRequest) -> None:
        beam = request.beam or settings.beam
        nbest = request.nbest or settings.nbest
        if nbest > beam:
            raise ApiError(400, f"field 'nbest': {nbest} is more than beam {beam}")

    async def translate_route(request: Request) -> Response:
        started = time.perf_counter()
        asked = parse_request(await read_body(request, options.limits.body_bytes), options.limits)
        check_options(asked)
        try:
            results = await batcher.submit(asked.text, asked.key)
        except DecodingFailed as exc:
            return JSONResponse({"error": f"decoding failed, try again: {exc}"}, status_code=503)
        translations = [{"text": nbest[0][0], "score": nbest[0][1],
                         "nbest": [{"text": text, "score": score} for text, score in nbest]} for nbest in results]
        return JSONResponse({"translations": translations, "model": options.name,
                             "seconds": round(time.perf_counter() - started, 4)})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": options.name, "precision": precision,
                             "machine": describe_machine(machine_info()), "queue": batcher.pending,
                             "batches": batcher.batches, "batched_sentences": batcher.decoded,
                             "workers": options.workers, "beam": settings.beam})

    async def page(request: Request) -> Response:
        return HTMLResponse(render(options.name, options.name, precision))

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return JSONResponse({"error": exc.message}, status_code=exc.status)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return JSONResponse({"error": f"{request.method} {request.url.path}: {exc.detail}"},
                            status_code=exc.status_code)

    async def internal_error(request: Request, exc: Exception) -> Response:
        traceback.print_exception(exc, file=sys.stderr)
        return JSONResponse({"error": f"internal error ({type(exc).__name__}); the service goes on"},
                            status_code=500)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        batcher.start()
        try:
            yield
        finally:
            await batcher.stop()
            translator.close()

    handlers: dict[Any, Any] = {ApiError: api_error, HTTPException: http_error, Exception: internal_error}
    return Starlette(routes=[Route("/", page, methods=["GET"]), Route("/health", health, methods=["GET"]),
                             Route("/translate", translate_route, methods=["POST"])],
                     exception_handlers=handlers, lifespan=lifespan)
