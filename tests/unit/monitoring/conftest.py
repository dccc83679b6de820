from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.monitoring.support import Made, make_history


@pytest.fixture(scope="package")
def history(tmp_path_factory: pytest.TempPathFactory) -> Made:
    return make_history(Path(tmp_path_factory.mktemp("monitoring")))
