"""A pickle that runs code when loaded, for the tests that check checkpoints are never unpickled."""
from pathlib import Path


def _touch(path: str):
    """What the malicious pickle below would run on load."""
    Path(path).write_text("pwned")
    return path


class Evil:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (_touch, (self.marker,))
