"""One HTTP GET to the server, bounded in time and size, every way it can break turned into one ``ServerError``.

``urllib``'s timeout bounds each socket operation, not the exchange: a server that trickles a byte at a time, or one
that was stopped (SIGSTOP) after it accepted the connection, would hold a scrape for as long as it likes. ``get``
holds the whole exchange (connect, request, status line, headers, body) to one deadline and the body to a size, and
turns what breaks HTTP into one line: a body cut short (``IncompleteRead``), a service on the port that does not
speak HTTP (``BadStatusLine``), a connection closed or reset without an answer (``RemoteDisconnected``), a timeout.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import urllib.parse
from dataclasses import dataclass
from typing import NoReturn

from vllm_playbooks.errors import ServerError

#: The most a scrape or a health answer may hold: a vLLM scrape is a few hundred kB.
MAX_BODY_BYTES = 64 * 1024 * 1024
_CHUNK = 64 * 1024


class NoAnswer(ServerError):
    """Nothing answered within the deadline: the connection was refused, or the server took too long (hung)."""


class BrokenAnswer(ServerError):
    """Something answered, but not in HTTP the runner can trust: a body cut short, a status line that is not HTTP,
    a connection closed or reset mid-answer, a body too large or not UTF-8."""


@dataclass(frozen=True)
class Answer:
    """An HTTP answer read whole: its status, its ``Content-Type`` header ('' without one) and its text."""

    status: int
    content_type: str
    text: str


def _read_body(response: http.client.HTTPResponse, url: str) -> bytes:
    body = bytearray()
    while chunk := response.read1(_CHUNK):
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise BrokenAnswer(f"{url}: the answer is larger than {MAX_BODY_BYTES} bytes")
    if response.length:  # Content-Length promised more than came
        raise http.client.IncompleteRead(bytes(body), response.length)
    return bytes(body)


def _raise_why(url: str, error: BaseException) -> NoReturn:
    """Raise the ``ServerError`` an exchange that failed (not by its deadline) ends in, its message one line saying
    why (an exception carries its message; the function returns none)."""
    if isinstance(error, ConnectionRefusedError):
        raise NoAnswer(f"{url}: connection refused ({error.strerror or error})") from None
    if isinstance(error, http.client.IncompleteRead):
        got, more = len(error.partial), error.expected
        raise BrokenAnswer(f"{url}: the answer was cut short ({got} bytes, {more} more promised)") from None
    if isinstance(error, http.client.RemoteDisconnected):
        raise BrokenAnswer(f"{url}: the server closed the connection without an answer") from None
    if isinstance(error, http.client.BadStatusLine):
        raise BrokenAnswer(f"{url}: the answer is not HTTP (status line {str(error)[:60]!r})") from None
    if isinstance(error, UnicodeDecodeError):
        raise BrokenAnswer(f"{url}: the answer is not UTF-8 text") from None
    if isinstance(error, OSError):
        raise BrokenAnswer(
            f"{url}: the connection failed ({type(error).__name__}: {error.strerror or error})"
        ) from None
    raise BrokenAnswer(f"{url}: the answer breaks HTTP ({type(error).__name__}: {str(error)[:80]})") from None


def get(url: str, timeout_s: float) -> Answer:
    """GET ``url`` (``http://host:port/path``), the whole exchange within ``timeout_s`` (at the deadline a timer
    shuts the socket down, however slowly bytes still come); ``NoAnswer`` when nothing answered in time,
    ``BrokenAnswer`` when the answer breaks HTTP, each with one line saying why."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout_s)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        if connection.sock is not None:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    try:
        connection.request("GET", parts.path or "/")
        response = connection.getresponse()
        text = _read_body(response, url).decode("utf-8")
        if expired.is_set():  # an answer without a length, shut at the deadline, is not whole
            raise TimeoutError("the deadline passed")
    except ServerError:
        raise
    except (http.client.HTTPException, OSError, UnicodeDecodeError) as error:
        if expired.is_set() or isinstance(error, TimeoutError):
            raise NoAnswer(f"{url}: no whole answer within {timeout_s:g} s; the server hangs") from None
        _raise_why(url, error)
    finally:
        timer.cancel()
        connection.close()
    return Answer(response.status, response.getheader("Content-Type", "") or "", text)
