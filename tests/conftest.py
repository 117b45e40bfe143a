import os
from pathlib import Path

import pytest

from posttrain.env import configure_offline

ROOT = Path(__file__).resolve().parent.parent
configure_offline()


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    from posttrain.world.tokenizer import build_tokenizer

    return build_tokenizer(tmp_path_factory.mktemp("tokenizer"))
