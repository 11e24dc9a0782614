"""The bundled server (embedded cascade, its default launch settings) for the recorder tests that
record against real models: started once for the package (test_conformance_bundled and
test_recorder_integration each started their own, some 5 s apiece)."""

from __future__ import annotations

import pytest

from tests.conftest import launched_server


@pytest.fixture(scope="package")
def server_url(tmp_path_factory):
    with launched_server(tmp_path_factory.mktemp("server"), "system: embedded-cascade\n") as info:
        yield info.ws_url
