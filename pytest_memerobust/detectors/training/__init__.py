"""What training changes in a detector: its adaptation methods, the augmentations and attacks a training run draws
its inputs with, the data checks, and the checkpoint and card it writes. The run itself (data, feature store,
epochs, checkpoints of its state) is run/training/."""
from .checkpoint import card_toml, save_trained
from .data import check_training_data, training_task

__all__ = ["card_toml", "check_training_data", "save_trained", "training_task"]
