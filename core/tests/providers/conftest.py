import pytest


@pytest.fixture
def anyio_backend() -> str:
    # The vendors' async SDK clients run on asyncio only.
    return "asyncio"
