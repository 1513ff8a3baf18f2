"""The trainable parts shared by MemeCLIP, MemeBLIP2 and MemeBLIP2+TDA (torch modules, no backbone code).

Module and parameter names follow the MemeCLIP code (image_map.proj.0, img_adapter.fc.0, pre_output.1,
classifier.weight), so its Lightning checkpoints map onto these modules key for key.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


class Adapter(nn.Module):
    """MemeCLIP's bottleneck adapter: Linear(d, d/r) -> ReLU -> Linear(d/r, d) -> ReLU, no biases."""

    def __init__(self, dim: int, reduction: int = 4):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(dim, dim // reduction, bias=False), nn.ReLU(inplace=True),
                                nn.Linear(dim // reduction, dim, bias=False), nn.ReLU(inplace=True))

    def forward(self, x):
        return self.fc(x)


class LinearProjection(nn.Module):
    def __init__(self, input_dim: int, output_dim: int, num_layers: int = 1, dropout: float = 0.1):
        super().__init__()
        layers = [nn.Linear(input_dim, output_dim), nn.Dropout(p=dropout)]
        for _ in range(1, num_layers):
            layers += [nn.ReLU(), nn.Linear(output_dim, output_dim), nn.Dropout(p=dropout)]
        self.proj = nn.Sequential(*layers)

    def forward(self, x):
        return self.proj(x)


class CosineClassifier(nn.Module):
    """Scaled cosine similarity to one weight vector per class; the weights can start from class-name prompts."""

    def __init__(self, dim: int, n_classes: int, scale: float = 30.0):
        super().__init__()
        self.scale = scale
        self.weight = nn.Parameter(torch.empty(n_classes, dim).uniform_(-1, 1).renorm_(2, 0, 1e-5).mul_(1e5))

    def apply_weight(self, weight: torch.Tensor) -> None:
        self.weight.data = weight.detach().clone().to(self.weight)

    def forward(self, x):
        return F.linear(F.normalize(x, dim=-1), F.normalize(self.weight, dim=-1)) * self.scale


class LinearClassifier(nn.Module):
    def __init__(self, dim: int, n_classes: int):
        super().__init__()
        self.weight = nn.Parameter(nn.init.kaiming_normal_(torch.empty(n_classes, dim)))
        self.bias = nn.Parameter(torch.zeros(n_classes))

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class TextDenoisingAdapter(nn.Module):
    """Rainbow Noise's TDA (eqs. 1-3): a gated, scaled residual correction of a text embedding.

    g = sigmoid(W_g x + b_g); x_update = s * g * MLP(LayerNorm(x)); y = x + Dropout(x_update).
    With the gate closed (g -> 0) the embedding passes unchanged, so clean captions keep their features.
    """

    def __init__(self, dim: int, hidden: int | None = None, dropout: float = 0.1, init_scale: float = 0.1):
        super().__init__()
        hidden = hidden or dim
        self.gate = nn.Linear(dim, 1)  # one gate value per embedding (the paper's scalar g)
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        self.scale = nn.Parameter(torch.tensor(float(init_scale)))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        g = torch.sigmoid(self.gate(x))
        update = self.scale * g * self.mlp(self.norm(x))
        return x + self.dropout(update)


@dataclass(frozen=True)
class HeadDepth:
    """How many Linear layers the projections (`mapping_layers`) and the pre-output block (`pre_output_layers`)
    stack."""

    mapping_layers: int = 1
    pre_output_layers: int = 1


@dataclass(frozen=True)
class ClassifierConfig:
    """The head's last layer: `kind` "cosine" (scaled cosine similarity to one weight per class, times `scale`) or
    "linear"."""

    kind: str = "cosine"
    scale: float = 30.0


@dataclass(frozen=True)
class HeadConfig:
    """A MemeHead's options besides its input and output sizes, with MemeCLIP's defaults: the width features are
    mapped to, the adapters' mix `ratio` and `reduction`, the dropout rates (projections, before and inside the
    pre-output block), the depth, the classifier, and Rainbow Noise's TDA with its dropout. A card's [params]
    names them flat (`from_params`, `params`)."""

    map_dim: int = 1024
    ratio: float = 0.2
    reduction: int = 4
    dropout: tuple[float, float, float] = (0.1, 0.4, 0.2)
    depth: HeadDepth = field(default_factory=HeadDepth)
    classifier: ClassifierConfig = field(default_factory=ClassifierConfig)
    tda: bool = False
    tda_dropout: float = 0.1

    @classmethod
    def from_params(cls, params: dict) -> HeadConfig:
        """The options a card's [params] (or a checkpoint's metadata) set, by their flat names; keys for other
        parts of the detector are left out, missing ones keep their defaults."""
        flat = cls().params()
        flat.update({key: value for key, value in params.items() if key in flat})
        return cls(flat["map_dim"], flat["ratio"], flat["reduction"], tuple(flat["dropout"]),
                   HeadDepth(flat["num_mapping_layers"], flat["num_pre_output_layers"]),
                   ClassifierConfig(flat["classifier"], flat["scale"]), flat["tda"], flat["tda_dropout"])

    def params(self) -> dict:
        """The options by the flat names a card's [params] gives them."""
        return {"map_dim": self.map_dim, "ratio": self.ratio, "reduction": self.reduction, "dropout": self.dropout,
                "num_mapping_layers": self.depth.mapping_layers,
                "num_pre_output_layers": self.depth.pre_output_layers, "classifier": self.classifier.kind,
                "scale": self.classifier.scale, "tda": self.tda, "tda_dropout": self.tda_dropout}


class MemeHead(nn.Module):
    """Projections, (TDA), adapters mixed by `ratio`, L2 normalisation, product fusion, pre-output block, classifier.

    `mode` leaves a modality out of the fusion for the channel ablation (tables 4 and 7): "text" classifies the text
    features alone, "image" the image features alone.
    """

    def __init__(self, image_dim: int, text_dim: int, n_classes: int, config: HeadConfig = HeadConfig()):
        super().__init__()
        map_dim, dropout = config.map_dim, config.dropout
        self.ratio, self.mode = config.ratio, "multimodal"
        self.has_image = image_dim > 0
        if self.has_image:
            self.image_map = LinearProjection(image_dim, map_dim, config.depth.mapping_layers, dropout[0])
            self.img_adapter = Adapter(map_dim, config.reduction)
        self.text_map = LinearProjection(text_dim, map_dim, config.depth.mapping_layers, dropout[0])
        self.text_adapter = Adapter(map_dim, config.reduction)
        self.tda = TextDenoisingAdapter(map_dim, dropout=config.tda_dropout) if config.tda else None
        layers: list[nn.Module] = [nn.Dropout(p=dropout[1])]
        for _ in range(config.depth.pre_output_layers):
            layers += [nn.Linear(map_dim, map_dim), nn.ReLU(), nn.Dropout(p=dropout[2])]
        self.pre_output = nn.Sequential(*layers)
        classifier = config.classifier
        if classifier.kind == "cosine":
            self.classifier = CosineClassifier(map_dim, n_classes, classifier.scale)
        elif classifier.kind == "linear":
            self.classifier = LinearClassifier(map_dim, n_classes)
        else:
            raise ValueError(f"classifier must be 'cosine' or 'linear', got {classifier.kind!r}")

    def _mix(self, projected, adapter):
        mixed = self.ratio * adapter(projected) + (1 - self.ratio) * projected
        return F.normalize(mixed, dim=-1)

    def forward(self, image_features, text_features):
        mode = self.mode if self.has_image else "text"
        if mode != "image":
            text = self.text_map(text_features)
            if self.tda is not None:
                text = self.tda(text)
            text = self._mix(text, self.text_adapter)
        if mode != "text":
            image = self._mix(self.image_map(image_features), self.img_adapter)
        fused = text if mode == "text" else image if mode == "image" else image * text
        return self.classifier(self.pre_output(fused))


class LinearProbe(nn.Module):
    """A linear probe: one Linear layer over the concatenated frozen image and text features (the adaptation
    method `linear`). `mode` leaves a channel out as MemeHead's does, by giving the probe zeros for it."""

    def __init__(self, image_dim: int, text_dim: int, n_classes: int):
        super().__init__()
        self.mode, self.has_image = "multimodal", image_dim > 0
        self.linear = nn.Linear(image_dim + text_dim, n_classes)

    def forward(self, image_features, text_features):
        mode = self.mode if self.has_image else "text"
        text = text_features if mode != "image" else torch.zeros_like(text_features)
        if not self.has_image:
            return self.linear(text)
        image = image_features if mode != "text" else torch.zeros_like(image_features)
        return self.linear(torch.cat([image, text], dim=-1))
