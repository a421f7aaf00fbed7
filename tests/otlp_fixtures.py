"""pytest fixtures around the test OTLP receiver (:mod:`tests.otlp_receiver`).

Load them with ``pytest_plugins = ["tests.otlp_fixtures"]`` (or import them into a
conftest). Every receiver binds 127.0.0.1 on a free port and stops at teardown.

- ``otlp_http_receiver``: a running OTLP/HTTP receiver.
- ``otlp_grpc_receiver``: a running OTLP/gRPC receiver.
- ``otlp_receiver``: parametrized over both (``http/protobuf``, ``grpc``).
- ``otlp_hanging_receiver``: parametrized over both, each sitting 30 s on
  every request (released at teardown).
- ``otlp_down_port``: a loopback port that refuses connections.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.otlp_receiver import GrpcReceiver, HttpReceiver, closed_endpoint

PROTOCOLS = ["http/protobuf", "grpc"]


def _receiver(protocol: str, hang: float = 0.0) -> HttpReceiver | GrpcReceiver:
    return HttpReceiver(hang=hang) if protocol == "http/protobuf" else GrpcReceiver(hang=hang)


@pytest.fixture
def otlp_http_receiver() -> Iterator[HttpReceiver]:
    """A running OTLP/HTTP protobuf receiver."""
    with HttpReceiver() as receiver:
        yield receiver


@pytest.fixture
def otlp_grpc_receiver() -> Iterator[GrpcReceiver]:
    """A running OTLP/gRPC receiver."""
    with GrpcReceiver() as receiver:
        yield receiver


@pytest.fixture(params=PROTOCOLS)
def otlp_receiver(request: pytest.FixtureRequest) -> Iterator[HttpReceiver | GrpcReceiver]:
    """A running receiver, once per protocol."""
    with _receiver(request.param) as receiver:
        yield receiver


@pytest.fixture(params=PROTOCOLS)
def otlp_hanging_receiver(
    request: pytest.FixtureRequest,
) -> Iterator[HttpReceiver | GrpcReceiver]:
    """A receiver that accepts each export and does not answer for 30 s."""
    with _receiver(request.param, hang=30.0) as receiver:
        yield receiver


@pytest.fixture
def otlp_down_port() -> Iterator[int]:
    """A loopback port where connections are refused (a collector that is down)."""
    with closed_endpoint() as port:
        yield port
