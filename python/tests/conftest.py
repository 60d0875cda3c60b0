import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # reference.py beside the tests

# A wait on a rank that will never come fails the test in seconds, not the default minute.
os.environ.setdefault("TESSERA_TIMEOUT_MS", "20000")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
