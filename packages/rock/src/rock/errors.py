"""rock's exceptions: one root, each message one sentence a user can act on."""


class RockError(Exception):
    """Root of rock's errors."""


class EngineUnavailable(RockError, ConnectionError):
    """No Docker engine answers."""


class ImageBuildError(RockError):
    """An image could not be built."""


class DaemonError(RockError):
    """The rock daemon refused or failed a request; ``status`` is the HTTP status."""

    status: int = 500

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class Unauthorized(DaemonError, PermissionError):
    """The request carried no token or a wrong one."""

    status = 401


class InvalidRequest(DaemonError, ValueError):
    """The request was malformed; ``fields`` names where."""

    status = 422

    def __init__(
        self, message: str, *, status: int | None = None, fields: list[str] | None = None
    ) -> None:
        super().__init__(message, status=status)
        self.fields = fields or []


class PoolExhausted(DaemonError):
    """A pool is at its maximum size and has no idle sandbox."""

    status = 429


class ShuttingDown(DaemonError):
    """The daemon is stopping and takes no new work."""

    status = 503


class DaemonUnreachable(RockError, ConnectionError):
    """No rock daemon answers at the URL."""


class DaemonLost(DaemonUnreachable):
    """The daemon went away while a request was under way: it may or may not have been
    carried out."""
