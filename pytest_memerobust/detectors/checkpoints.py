"""Reading and writing weights without ever unpickling an untrusted file."""
from __future__ import annotations

import json
from pathlib import Path

from ..atomic import atomic_path
from ..errors import CheckpointError

SAFE_SUFFIXES = (".safetensors",)
TORCH_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin")


def read_checkpoint_metadata(path: Path) -> dict:
    """A checkpoint's metadata alone: a safetensors file's header is read without its tensors (a check before a
    run, e.g. `train --init`, need not load weights the run loads again); a torch file has to be loaded whole."""
    path = Path(path)
    if path.is_file() and (path.suffix in SAFE_SUFFIXES or _looks_like_safetensors(path)):
        from safetensors import SafetensorError
        from safetensors.torch import safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                return dict(f.metadata() or {})
        except (SafetensorError, OSError, ValueError) as exc:
            raise CheckpointError(f"corrupt safetensors checkpoint {path}: {exc}") from None
    return load_state_dict(path)[1]


def load_state_dict(path: Path) -> tuple[dict, dict]:
    """(tensors, metadata) from a safetensors file, or from a torch file with `weights_only=True` (no pickle code)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    if path.suffix in SAFE_SUFFIXES or _looks_like_safetensors(path):
        from safetensors import SafetensorError
        from safetensors.torch import load_file, safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                metadata = dict(f.metadata() or {})
            return load_file(str(path)), metadata
        except (SafetensorError, OSError, ValueError) as exc:
            raise CheckpointError(f"corrupt safetensors checkpoint {path}: {exc}") from None
    if path.suffix in TORCH_SUFFIXES:
        import pickle

        import torch

        try:
            obj = torch.load(str(path), map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as exc:
            raise CheckpointError(
                f"refusing checkpoint {path}: it cannot be loaded with weights_only=True ({exc}); "
                "convert it to safetensors"
            ) from None
        state = obj.get("state_dict", obj) if isinstance(obj, dict) else None
        if not isinstance(state, dict):
            raise CheckpointError(f"checkpoint {path} holds no state dict")
        return state, {}
    raise CheckpointError(
        f"unsupported checkpoint format {path.suffix!r} for {path}; use {SAFE_SUFFIXES + TORCH_SUFFIXES}"
    )


def _looks_like_safetensors(path: Path) -> bool:
    """Safetensors content under another suffix (a `.pt` name given to a safetensors file): an 8-byte little-endian
    header length, then the JSON header. Read as safetensors, it needs no unpickling."""
    with open(path, "rb") as f:
        head = f.read(9)
    if len(head) < 9:
        return False
    return head[8:9] == b"{" and 0 < int.from_bytes(head[:8], "little") < path.stat().st_size


def check_weights(state: dict, expected: dict, source: str) -> None:
    """Weights that fit in kind, not only in shape: a floating parameter given as integers (silently cast, it is
    not the trained model) or holding NaN or infinity (every prediction would be NaN, every case would fail with a
    traceback) is refused here, naming the checkpoint and the tensor."""
    import torch

    for key in sorted(set(state) & set(expected)):
        value, want = state[key], expected[key]
        if not want.is_floating_point():
            continue
        if not value.is_floating_point():
            raise CheckpointError(f"{source}: tensor {key!r} is {str(value.dtype).removeprefix('torch.')}, the model "
                                  f"expects {str(want.dtype).removeprefix('torch.')} weights: not a checkpoint of "
                                  "this model (or a damaged one)")
        bad = int((~torch.isfinite(value)).sum())
        if bad:
            raise CheckpointError(f"{source}: tensor {key!r} holds {bad} NaN or infinite values of {value.numel()}: "
                                  "a diverged or damaged training run; use an earlier checkpoint")


def save_state_dict(tensors: dict, path: Path, metadata: dict | None = None) -> None:
    """Write safetensors atomically (a reader never sees a half-written file) and canonically: the same tensors and
    metadata give the same bytes in every process."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(state_dict_bytes(tensors, metadata))


def state_dict_bytes(tensors: dict, metadata: dict | None = None) -> bytes:
    """The safetensors file of `tensors` and `metadata`, canonical (canonical_header)."""
    from safetensors.torch import save

    meta = {k: v if isinstance(v, str) else json.dumps(v) for k, v in (metadata or {}).items()}
    return canonical_header(save({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, metadata=meta))


def canonical_header(data: bytes) -> bytes:
    """The safetensors file with its JSON header written with sorted keys: the library keeps the metadata in a
    hash map whose order changes from process to process, so two saves of the same weights differed in bytes. The
    tensors' offsets count from the end of the header, so only the header (padded to 8 bytes, as the format asks)
    is rewritten."""
    size = int.from_bytes(data[:8], "little")
    header = json.dumps(json.loads(data[8 : 8 + size]), sort_keys=True, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    return len(header).to_bytes(8, "little") + header + data[8 + size :]
