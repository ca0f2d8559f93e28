"""Upload a file, retrying on failure."""

from config import RETRIES, TIMEOUT_SECONDS


def upload(path: str) -> bool:
    # TODO: back off between attempts.
    return any(send(path, timeout=TIMEOUT_SECONDS) for _ in range(RETRIES))


def send(path: str, timeout: int) -> bool:
    return bool(path) and timeout > 0
