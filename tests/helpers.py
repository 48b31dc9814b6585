"""Re-export test helpers so test modules can `from tests.helpers import ...`."""
from tests.conftest import kubectl, wait_for  # noqa: F401
