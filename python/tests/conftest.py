import os

import pytest


def pytest_collection_modifyitems(config, items):
    """Where SIXFOLD_REQUIRE_GPU=1 (the GPU check), a skipped GPU test is a failure."""
    if not os.environ.get("SIXFOLD_REQUIRE_GPU"):
        return
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.gpu_required)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device")
    config.addinivalue_line("markers", "gpu_required: internal")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and item.get_closest_marker("gpu_required"):
        rep.outcome = "failed"
        rep.longrepr = "SIXFOLD_REQUIRE_GPU=1 but this GPU test was skipped: " + str(rep.longrepr)
