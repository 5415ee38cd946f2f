import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton kernels run on CPU tensors in tests (before triton is imported)
if "KERNELFLOW_CACHE" not in os.environ:  # measured GPU ceilings of this machine never leak into the tests
    import tempfile

    os.environ["KERNELFLOW_CACHE"] = tempfile.mkdtemp(prefix="kf-cache-")
# 1 s of timing per shape, not the CPU's 5: the tests check what a run does with its times, never how fast an
# interpreted kernel is; a test of the budget rule itself sets or clears this
os.environ.setdefault("KERNELFLOW_TIMING_BUDGET_S", "1")


import pytest  # noqa: E402

from tests.s3_fixtures import moto_url, proxy, s3  # noqa: E402, F401  (S3 fixtures; moto and boto3 loaded when used)


@pytest.fixture(scope="session")
def prefect_harness():
    """Prefect's own test harness: a temporary database and API for flow-level tests (~10 s to start; given as long as
    the CLI gives its own server, since a loaded 2-core machine passes the harness's default 30 s)."""
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    from prefect.testing.utilities import prefect_test_harness

    from kernelflow.cli import EPHEMERAL_STARTUP_S

    with prefect_test_harness(server_startup_timeout=EPHEMERAL_STARTUP_S):
        yield


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that starts Prefect (the prefect_harness fixture) runs a flow end to end: it is slow (pyproject.toml)."""
    for item in items:
        if "prefect_harness" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
