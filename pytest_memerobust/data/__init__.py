"""Loaders by name (`NAME:PATH[:SPLIT]`) producing `Meme` records; `demo` draws its own memes."""
from .demo import demo_dataset, load_demo
from .loaders import LOADERS, load_dataset, loader, parse_spec, register_loader
from . import datasets  # noqa: F401,E402  (registers figmemes, toxictags, mami, harmeme, hateful_memes_fine_grained)
from .image_files import load_rgb
from .meme import Dataset, Meme

register_loader("demo", load_demo, splits=("train", "val", "test"))

__all__ = ["Dataset", "Meme", "LOADERS", "demo_dataset", "load_dataset", "load_rgb", "loader", "parse_spec",
           "register_loader"]
