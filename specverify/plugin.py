"""pytest plugin (entry point ``pytest11``): options and fixtures for the shipped conformance suite.

    pytest --pyargs specverify.suite --specverify-backend=MODULE:ATTR -n auto

Loaded in every pytest run of an environment that has specverify installed, so it imports nothing
heavy at module level.
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("specverify")
    group.addoption("--specverify-backend", default=os.environ.get("SPECVERIFY_BACKEND", "cpu"),
                    help="backend to check: reference, cpu, triton, or MODULE:ATTR (default: cpu or $SPECVERIFY_BACKEND)")
    group.addoption("--specverify-profile", default=None,
                    help="ci, dev or nightly (default: $SPECVERIFY_PROFILE or ci)")
    group.addoption("--specverify-device", default=None, help="override the profile's device")


def pytest_configure(config):
    profile = config.getoption("--specverify-profile", default=None)
    if profile:
        os.environ["SPECVERIFY_PROFILE"] = profile


@pytest.fixture(scope="session")
def specverify_profile(request):
    from dataclasses import replace  # noqa: PLC0415

    from specverify.strategies import get_profile  # noqa: PLC0415
    profile = get_profile(request.config.getoption("--specverify-profile"))
    device = request.config.getoption("--specverify-device")
    return replace(profile, device=device) if device else profile


@pytest.fixture(scope="session")
def specverify_backend(request):
    from specverify.backends import get_backend  # noqa: PLC0415
    return get_backend(request.config.getoption("--specverify-backend"))
