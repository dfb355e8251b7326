"""One bounded HTTP GET (engine.exchange) against sockets that answer badly, and the scrape trust check."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from vllm_playbooks.engine.exchange import BrokenAnswer, NoAnswer, get
from vllm_playbooks.engine.metrics import ScrapeFault, untrusted_scrape
from vllm_playbooks.engine.server import free_port

GOOD = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"


def _serve(answer: bytes, trickle_s: float | None) -> Iterator[int]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def accept() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn, contextlib.suppress(OSError):  # the client shuts a trickle down at its deadline
                conn.recv(4096)
                for byte in answer if trickle_s else [answer]:
                    conn.sendall(bytes([byte]) if trickle_s else byte)
                    if trickle_s:
                        time.sleep(trickle_s)

    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[1]


@pytest.fixture
def answering(request: pytest.FixtureRequest) -> Iterator[int]:
    """A port that answers one GET with ``request.param`` (bytes, or (bytes, seconds between bytes))."""
    answer, trickle = request.param if isinstance(request.param, tuple) else (request.param, None)
    yield from _serve(answer, trickle)


@pytest.mark.parametrize("answering", [GOOD], indirect=True)
def test_a_good_answer_is_read_whole(answering: int) -> None:
    answer = get(f"http://127.0.0.1:{answering}/metrics", 2)
    assert (answer.status, answer.content_type, answer.text) == (200, "text/plain", "hello")


@pytest.mark.parametrize(
    ("answering", "kind", "why"),
    [
        (GOOD.replace(b"5\r\n", b"500\r\n"), BrokenAnswer, r"cut short \(5 bytes, 495 more promised\)"),
        (b"SSH-2.0-OpenSSH_9.6\r\n", BrokenAnswer, "not HTTP"),
        (b"", BrokenAnswer, "closed the connection without an answer"),
        (GOOD.replace(b"hello", b"\xff\xfe\xfd\xfc\xfb"), BrokenAnswer, "not UTF-8"),
    ],
    indirect=["answering"],
)
def test_an_answer_that_breaks_http_is_one_line(answering: int, kind: type, why: str) -> None:
    with pytest.raises(kind, match=why) as raised:
        get(f"http://127.0.0.1:{answering}/metrics", 2)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("answering", [(GOOD, 0.2)], indirect=True)
def test_a_trickling_answer_is_cut_at_the_deadline_not_per_byte(answering: int) -> None:
    """Each byte comes within the socket timeout, the whole answer would take 13 s: the deadline (1 s) holds."""
    began = time.monotonic()
    with pytest.raises(NoAnswer):
        get(f"http://127.0.0.1:{answering}/metrics", 1.0)
    assert time.monotonic() - began < 1.5


def test_a_listener_that_never_answers_and_a_closed_port_are_no_answer() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        began = time.monotonic()
        with pytest.raises(NoAnswer, match="no whole answer within 0.5 s"):
            get(f"http://127.0.0.1:{silent.getsockname()[1]}/health", 0.5)
        assert 0.5 <= time.monotonic() - began < 1.0
    with pytest.raises(NoAnswer, match="connection refused"):
        get(f"http://127.0.0.1:{free_port()}/health", 1.0)


SCRAPE = (
    '# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{engine="0"} 0.0\n'
    '# TYPE vllm:spec_decode_num_drafts_total counter\nvllm:spec_decode_num_drafts_total{engine="0"} 4.0\n'
    "# TYPE vllm:spec_decode_num_draft_tokens_total counter\nvllm:spec_decode_num_draft_tokens_total 16.0\n"
    "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\nvllm:spec_decode_num_accepted_tokens_total 9.0\n"
)


@pytest.mark.parametrize(
    ("text", "speculative", "fault"),
    [
        (SCRAPE, True, None),
        (SCRAPE.split("# TYPE vllm:spec")[0], False, None),
        (SCRAPE.split("# TYPE vllm:spec")[0], True, ScrapeFault.NO_SPEC_COUNTERS),
        (" \n", False, ScrapeFault.EMPTY),
        ("<!DOCTYPE html><html></html>", False, ScrapeFault.HTML),
        ('# TYPE vllm:x_total counter\nvllm:x_total{engine="0" 1\n', False, ScrapeFault.NOT_PROMETHEUS),
        ("# TYPE other_total counter\nother_total 1.0\n", False, ScrapeFault.NO_VLLM_COUNTER),
    ],
)
def test_a_scrape_is_trusted_only_as_vllm_prometheus_text(
    text: str, speculative: bool, fault: ScrapeFault | None
) -> None:
    found = untrusted_scrape(text, speculative)
    assert (found if found is None else found[0]) == fault
    assert found is None or bool(found[1]) == (fault == ScrapeFault.NOT_PROMETHEUS)  # the parser's error, alone
