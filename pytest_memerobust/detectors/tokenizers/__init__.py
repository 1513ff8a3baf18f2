"""Tokenizer files that ship with the package, so a backbone that needs only a tokenizer needs no model package
(each folder's README says where its files come from and under which licence)."""
from pathlib import Path

# all-MiniLM-L6-v2's WordPiece tokenizer: what a backbone spec's `"tokenizer": "minilm"` reads
MINILM_TOKENIZER = Path(__file__).parent / "all-minilm-l6-v2"
