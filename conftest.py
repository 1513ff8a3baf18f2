"""Lets a checkout run the suites with the plugin from source, even before `pip install -e .`."""
import sys
from importlib.metadata import entry_points
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

if not any(ep.name == "memerobust" for ep in entry_points(group="pytest11")):
    pytest_plugins = ["pytest_memerobust.plugin"]
