"""A model folder that transformers cannot load (softeval.lm.models.load_model) is a UserError, one
line naming the folder, not a traceback."""

from __future__ import annotations

import pytest

from softeval.errors import UserError
from softeval.lm.models import load_model


def test_a_folder_whose_config_is_no_model_is_one_line(tmp_path):
    """Past the checks (a config.json is there), what transformers cannot load is a UserError too."""
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UserError, match=f"could not load model '{tmp_path}'"):
        load_model(str(tmp_path), device="cpu")
