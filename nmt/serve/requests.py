"""A translation request's body, read and checked: every refusal is an :class:`ApiError` whose one-line message
names the field (or the body) at fault and whose status says why (400 malformed, 413 over a limit)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

FIELDS = ("text", "pretokenized", "beam", "nbest")


class ApiError(Exception):
    """A request the service refuses: ``status`` and a one-line ``message`` for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Limits:
    """What one request may ask (``nmt serve --max-sentences/--max-chars/--max-body/--max-beam``)."""

    sentences: int = 64
    chars: int = 1000
    body_bytes: int = 1_000_000
    beam: int = 16


@dataclass(frozen=True)
class TranslationRequest:
    """A checked request: its lines and the options that decide how they decode (None: the model's default)."""

    text: list[str]
    pretokenized: bool = False
    beam: int | None = None
    nbest: int | None = None

    @property
    def key(self) -> tuple[bool, int | None, int | None]:
        """Requests with the same key decode in one batch."""
        return self.pretokenized, self.beam, self.nbest


def _integer(body: dict[str, Any], field: str, low: int, high: int) -> int | None:
    value = body.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"field '{field}': {json.dumps(value)[:40]} is not an integer")
    if not low <= value <= high:
        raise ApiError(400, f"field '{field}': {value} is not between {low} and {high}")
    return value


def parse_request(raw: bytes, limits: Limits) -> TranslationRequest:
    """The request in ``raw`` (a JSON object: ``text`` a string or a list of strings, optional ``pretokenized``,
    ``beam``, ``nbest``), or the :class:`ApiError` that says what is wrong with it."""
    if len(raw) > limits.body_bytes:
        raise ApiError(413, f"request body: {len(raw)} bytes, over the limit of {limits.body_bytes}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"request body: invalid UTF-8 at byte {exc.start}") from None
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"request body: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body: a JSON object is expected, e.g. {\"text\": [\"Ola mundo .\"]}")
    unknown = [key for key in body if key not in FIELDS]
    if unknown:
        raise ApiError(400, f"unknown field '{unknown[0]}' (valid: {', '.join(FIELDS)})")
    lines = body.get("text")
    if isinstance(lines, str):
        lines = [lines]
    if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
        raise ApiError(400, "field 'text': a string or a list of strings is expected")
    if not lines:
        raise ApiError(400, "field 'text': no sentence given")
    if len(lines) > limits.sentences:
        raise ApiError(413, f"field 'text': {len(lines)} sentences, over the limit of {limits.sentences}")
    for i, line in enumerate(lines):
        if len(line) > limits.chars:
            raise ApiError(413, f"field 'text[{i}]': {len(line)} characters, over the limit of {limits.chars}")
        if "\n" in line or "\r" in line:
            raise ApiError(400, f"field 'text[{i}]': one sentence per item (a line break was found)")
    pretokenized = body.get("pretokenized", False)
    if not isinstance(pretokenized, bool):
        raise ApiError(400, "field 'pretokenized': true or false is expected")
    beam = _integer(body, "beam", 1, limits.beam)
    nbest = _integer(body, "nbest", 1, limits.beam)
    if nbest is not None and beam is not None and nbest > beam:
        raise ApiError(400, f"field 'nbest': {nbest} is more than beam {beam}")
    return TranslationRequest(lines, pretokenized, beam, nbest)
