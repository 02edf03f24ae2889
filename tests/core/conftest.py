"""Fixtures of the core tests that several files share."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A small random Llama (grouped-query attention, rope_theta 500) saved with save_pretrained: (path, model)."""
    from loader_reference import build

    model = build("llama", num_key_value_heads=2, rope_theta=500.0)
    path = tmp_path_factory.mktemp("llama")
    model.save_pretrained(path)
    return path, model
