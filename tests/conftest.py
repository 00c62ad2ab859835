import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture
def lm():
    from tiny import tiny_lm

    return tiny_lm()
