"""Training a detector: the loop (frozen features or encoders in the loop), the data checks, what a run writes."""
from .checkpoint import card_toml, save_trained
from .data import check_training_data, training_task
from .loop import TrainingResult, train_head

__all__ = ["TrainingResult", "card_toml", "check_training_data", "save_trained", "train_head", "training_task"]
