"""Errors the package raises: one base class, one subclass per kind of failure."""


class PlaybookError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(PlaybookError, ValueError):
    """A configuration that cannot run: raised before any GPU time is spent."""


class SchemaError(PlaybookError, ValueError):
    """A data row or file that breaks the result schema or the provenance rule."""


class ServerError(PlaybookError, RuntimeError):
    """The vLLM server failed to start, died, or did not become healthy in time."""


class CapacityError(ConfigError):
    """A configuration whose weights and KV cache cannot fit the GPU memory it asks for."""


class PortTakenError(ServerError):
    """The server's port was taken by another process (a plain listener, or a foreign server answering /health)."""


class StorageError(PlaybookError):
    """The data folder cannot be written (read-only, full): the run stops, keeping what it recorded."""
