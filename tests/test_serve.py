"""``nmt serve`` as users meet it: the real service on a free loopback port, driven over HTTP. Single requests, the
page and health; 60 concurrent clients whose answers equal ``nmt translate``'s; every bad input a 4xx naming the
field; a SIGKILLed decoding process answered by a 503 and replaced; SIGTERM under load loses nothing and exits 0."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from nmt import cli
from tests.test_elastic import _children
from tests.test_translate import synthetic_sentences, tiny_checkpoint

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Service:
    """A running ``nmt serve`` subprocess and a tiny HTTP client for it."""

    def __init__(self, checkpoint: Path, *flags: str) -> None:
        self.port = free_port()
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "NMT_ALLOCATOR": "system"}
        self.process = subprocess.Popen([sys.executable, "-m", "nmt", "serve", "--checkpoint", str(checkpoint),
                                         "--port", str(self.port), "--precision", "fp32", *flags],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.time() + 120
        while time.time() < deadline:
            assert self.process.poll() is None, self.process.communicate()[1][-2000:]
            try:
                if self.call("GET", "/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("the service did not start")

    def call(self, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            connection.request(method, path, body=body, headers=headers or {"Content-Type": "application/json"})
            response = connection.getresponse()
            data = response.read()
            kind = response.getheader("Content-Type", "")
            return response.status, json.loads(data) if "json" in kind else data.decode("utf-8")
        finally:
            connection.close()

    def translate(self, payload: Any) -> tuple[int, Any]:
        return self.call("POST", "/translate", json.dumps(payload).encode("utf-8"))

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def service(checkpoint: Path) -> Iterator[Service]:
    running = Service(checkpoint, "--workers", "2")
    yield running
    assert running.stop() == 0


def cli_translations(checkpoint: Path, lines: list[str], tmp_path: Path) -> list[str]:
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert cli.main(["translate", "--checkpoint", str(checkpoint), "--pretokenized", "--precision", "fp32",
                     "--input", str(source), "--output", str(out), "-q"]) == 0
    return out.read_text(encoding="utf-8").splitlines()


def test_one_request_health_and_page(service: Service) -> None:
    status, answer = service.translate({"text": ["the cat sat", "a dog"], "pretokenized": True, "nbest": 2})
    assert status == 200 and len(answer["translations"]) == 2
    first = answer["translations"][0]
    assert first["text"] == first["nbest"][0]["text"] and len(first["nbest"]) == 2 and answer["seconds"] > 0
    status, health = service.call("GET", "/health")
    assert status == 200 and health["status"] == "ok" and health["workers"] == 2
    assert health["model"].endswith("tiny.pt") and health["precision"].startswith("fp32")
    assert "torch" in health["machine"] and health["batches"] >= 1 and health["batched_sentences"] >= 2
    status, page = service.call("GET", "/")
    assert status == 200 and "<button id=\"translate\"" in page and "tiny.pt" in page


def test_concurrent_clients_get_what_nmt_translate_gives(service: Service, checkpoint: Path, tmp_path: Path) -> None:
    lines = synthetic_sentences(120, seed=11)
    requests = [lines[i:i + 2] for i in range(0, len(lines), 2)]  # 60 clients, 2 sentences each
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        answers = list(pool.map(lambda text: service.translate({"text": text, "pretokenized": True}), requests))
    assert all(status == 200 for status, _ in answers)
    served = [t["text"] for _, answer in answers for t in answer["translations"]]
    assert served == cli_translations(checkpoint, lines, tmp_path)


BAD = [  # (body, status, words the error must contain)
    (b'{"text": ["a"]', 400, "not JSON"),
    (b'["a"]', 400, "JSON object"),
    (b'{"text": 3}', 400, "field 'text'"),
    (b'{"text": ["a", 4]}', 400, "field 'text'"),
    (b'{"text": []}', 400, "field 'text'"),
    (b'{"text": ["a"], "beam": "4"}', 400, "field 'beam'"),
    (b'{"text": ["a"], "beam": 0}', 400, "field 'beam'"),
    (b'{"text": ["a"], "beam": 99}', 400, "field 'beam'"),
    (b'{"text": ["a"], "pretokenized": "yes"}', 400, "field 'pretokenized'"),
    (b'{"text": ["a"], "beam": 2, "nbest": 3}', 400, "field 'nbest'"),
    (b'{"text": ["a"], "nbest": 4}', 400, "field 'nbest'"),  # more than the model's beam of 3
    (b'{"text": ["a"], "temperature": 1}', 400, "unknown field 'temperature'"),
    (b'{"text": ["a\\nb"]}', 400, "field 'text[0]'"),
    ('{"text": ["caf\u00e9"]}'.encode("latin-1"), 400, "invalid UTF-8"),
    (json.dumps({"text": ["a"] * 65}).encode(), 413, "65 sentences"),
    (json.dumps({"text": ["a", "x" * 1001]}).encode(), 413, "field 'text[1]'"),
    (json.dumps({"text": ["a " * 600_000]}).encode(), 413, "request body"),
]


@pytest.mark.parametrize(("body", "status", "words"), BAD)
def test_bad_input_is_a_4xx_naming_the_field(service: Service, body: bytes, status: int, words: str) -> None:
    got, answer = service.call("POST", "/translate", body)
    assert got == status and words in answer["error"] and "\n" not in answer["error"]
    assert "Traceback" not in answer["error"]


def test_unknown_paths_and_methods_answer_json(service: Service) -> None:
    assert service.call("GET", "/nothing")[0] == 404
    status, answer = service.call("GET", "/translate")
    assert status == 405 and "GET /translate" in answer["error"]


def test_a_decoding_process_killed_holding_a_batch_answers_503_then_is_replaced(service: Service) -> None:
    lines = synthetic_sentences(60, seed=3)  # several batches: both decoding processes get work
    assert service.translate({"text": lines, "pretokenized": True})[0] == 200
    workers = _children(service.process.pid)
    assert len(workers) == 2
    for pid in workers:  # stopped, they take their batches and hold them
        os.kill(pid, signal.SIGSTOP)
    with ThreadPoolExecutor(max_workers=1) as pool:
        held = pool.submit(service.translate, {"text": lines, "pretokenized": True})
        deadline = time.time() + 30
        while service.call("GET", "/health")[1]["queue"] == 0 and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the batch has gone to the stopped processes
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        status, answer = held.result(timeout=60)
    assert status == 503 and "decoding failed" in answer["error"]
    assert any(str(pid) in answer["error"] for pid in workers), answer["error"]
    status, answer = service.translate({"text": lines, "pretokenized": True})
    assert status == 200 and len(answer["translations"]) == 60
    assert not set(workers) & set(_children(service.process.pid))  # replaced


def test_sigterm_under_load_answers_what_it_accepted_and_exits_zero(checkpoint: Path) -> None:
    running = Service(checkpoint)
    lines = synthetic_sentences(40, seed=5)

    def client(i: int) -> int:
        try:
            return running.translate({"text": lines[i:] + lines[:i], "pretokenized": True})[0]
        except ConnectionError:
            return -1  # refused after the service stopped accepting: never accepted, so nothing was lost

    with ThreadPoolExecutor(max_workers=12) as pool:
        futures = [pool.submit(client, i) for i in range(12)]
        time.sleep(0.3)
        running.process.send_signal(signal.SIGTERM)
        statuses = [f.result() for f in futures]
    assert running.process.wait(timeout=60) == 0
    assert statuses.count(200) >= 1 and set(statuses) <= {200, -1}, statuses


def test_the_page_translates_in_a_real_browser(service: Service) -> None:
    """Headless Chromium (Debian's chromium and chromium-driver, which make install sets up as root): type a
    sentence, click Translate, read the translation from the page."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service as DriverService
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver_path is None:
        pytest.skip("needs chromium and chromedriver (scripts/install puts them there as root)")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=DriverService(executable_path=driver_path), options=options)
    try:
        driver.get(f"http://127.0.0.1:{service.port}/")
        assert "tiny.pt" in driver.find_element(By.ID, "model").text
        driver.find_element(By.ID, "source").send_keys("the big cat sat on the mat .")
        driver.find_element(By.ID, "translate").click()
        WebDriverWait(driver, 60).until(lambda d: d.find_element(By.ID, "translate").is_enabled())
        shown = driver.find_element(By.ID, "output")
        assert shown.get_attribute("class") != "error", shown.text
        expected = service.translate({"text": ["the big cat sat on the mat ."]})[1]["translations"][0]["text"]
        assert expected and shown.text == expected.strip()
    finally:
        driver.quit()


def test_the_default_is_one_decoding_process_per_core_on_a_cpu() -> None:
    from nmt.commands.serve import default_workers

    assert default_workers(torch.device("cpu")) == min(torch.get_num_threads(), 8)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(12)  # a many-core machine: not a replica per core unasked
        assert default_workers(torch.device("cpu")) == 8
    finally:
        torch.set_num_threads(before)
    assert default_workers(torch.device("cuda")) == 1  # a GPU decodes in the service's process


@pytest.mark.parametrize("flag", ["--hold-ms", "--window-ms"])
def test_a_negative_wait_is_a_one_line_error(flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Checked before the model loads: the checkpoint does not even exist."""
    assert cli.main(["serve", "--checkpoint", str(tmp_path / "missing.pt"), flag, "-1"]) != 0
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flag} -1.0 must be >= 0") and err.count("\n") == 1
