"""One HTTP GET to the server, bounded in time and size, every way it can break turned into one ``ServerError``.

``urllib``'s timeout bounds each socket operation, not the exchange: a server that trickles a byte at a time, or one
that was stopped (SIGSTOP) after it accepted the connection, would hold a scrape for as long as it likes. ``get``
holds the whole exchange (connect, request, status line, headers, body) to one deadline and the body to a size, and
turns what breaks HTTP into one line: a body cut short (``IncompleteRead``), a service on the port that does not
speak HTTP (``BadStatusLine``), a connection closed or reset without an answer (``RemoteDisconnected``), a timeout.
"""

from __future__ import annotations

import http.client
import socket
import time
import urllib.parse
from dataclasses import dataclass

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


def _read_body(response: http.client.HTTPResponse, sock: socket.socket | None, deadline: float, url: str) -> bytes:
    body = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise NoAnswer(f"{url}: no whole answer within the deadline ({len(body)} bytes of the body read)")
        if sock is not None:
            sock.settimeout(left)
        chunk = response.read1(_CHUNK) if not response.isclosed() else b""
        if not chunk:
            if response.length:  # Content-Length promised more than came
                raise http.client.IncompleteRead(bytes(body), response.length)
            return bytes(body)
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise BrokenAnswer(f"{url}: the answer is larger than {MAX_BODY_BYTES} bytes")


def get(url: str, timeout_s: float) -> Answer:
    """GET ``url`` (``http://host:port/path``), the whole exchange within ``timeout_s``; ``NoAnswer`` when nothing
    answered in time, ``BrokenAnswer`` when the answer breaks HTTP, each with one line saying why."""
    parts = urllib.parse.urlsplit(url)
    deadline = time.monotonic() + timeout_s
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout_s)
    try:
        connection.request("GET", parts.path or "/")
        sock = connection.sock
        if sock is not None:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
        response = connection.getresponse()
        body = _read_body(response, sock, deadline, url)
        text = body.decode("utf-8")
    except ServerError:
        raise
    except (TimeoutError, socket.timeout) as error:
        raise NoAnswer(f"{url}: no answer within {timeout_s:g} s ({error or 'timed out'}); the server hangs") from None
    except ConnectionRefusedError as error:
        raise NoAnswer(f"{url}: connection refused ({error.strerror or error})") from None
    except http.client.IncompleteRead as error:
        got, expected = len(error.partial), error.expected
        raise BrokenAnswer(f"{url}: the answer was cut short ({got} bytes, {expected} more promised)") from None
    except http.client.RemoteDisconnected:
        raise BrokenAnswer(f"{url}: the server closed the connection without an answer") from None
    except http.client.BadStatusLine as error:
        raise BrokenAnswer(f"{url}: the answer is not HTTP (status line {str(error)[:60]!r})") from None
    except http.client.HTTPException as error:
        raise BrokenAnswer(f"{url}: the answer breaks HTTP ({type(error).__name__}: {str(error)[:80]})") from None
    except UnicodeDecodeError:
        raise BrokenAnswer(f"{url}: the answer is not UTF-8 text") from None
    except OSError as error:
        raise BrokenAnswer(f"{url}: the connection failed ({type(error).__name__}: "
                           f"{error.strerror or error})") from None  # fmt: skip
    finally:
        connection.close()
    return Answer(response.status, response.getheader("Content-Type", "") or "", text)
