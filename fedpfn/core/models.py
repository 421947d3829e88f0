"""Model zoo for the simulations.

Every model is a representation followed by a final Linear layer in an attribute named
``classifier``: anchoring options include or leave out the output layer by name, and
``model(x, with_features=True)`` also returns the representation the classifier reads
(what MOON contrasts), so that one functional call gives both.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch
import torch.nn.functional as F
from torch import nn

MODELS = ("mlp", "cnn", "resnet20", "vgg11")  # each has a class in _BUILDERS at the end


def build_model(
    name: str,
    input_shape: tuple[int, int, int],
    num_classes: int,
    projection_head: int = 0,
    width: int = 0,
) -> ZooModel:
    """Build ``name`` (one of MODELS) for C x H x W inputs and ``num_classes`` outputs.

    ``projection_head`` > 0 puts MOON's projection head (a 2-layer MLP to that width) between
    the model's representation and its classifier (``WithProjectionHead``). ``width`` > 0 sets
    the MLP's hidden width (the alignment analysis varies it); 0 keeps each model's own.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    if len(input_shape) != 3 or any(int(d) < 1 for d in input_shape):
        raise ValueError(f"input_shape must be (channels, height, width), got {input_shape!r}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be positive, got {num_classes}")
    shape = (int(input_shape[0]), int(input_shape[1]), int(input_shape[2]))
    if name == "cnn" and min(shape[1:]) < CNN_MIN_SIDE:
        raise ValueError(
            f"the cnn needs images of at least {CNN_MIN_SIDE} x {CNN_MIN_SIDE} pixels (three unpadded 3 x 3 "
            f"convolutions and two 2 x 2 pools), got {shape[1]} x {shape[2]}; use mlp, resnet20 or vgg11"
        )
    if width and name != "mlp":
        raise ValueError(f"width={width}: only the mlp takes a hidden width; leave it 0 for {name}")
    model = MLP(shape, num_classes, width) if width else _BUILDERS[name](shape, num_classes)
    return WithProjectionHead(model, projection_head, num_classes) if projection_head else model


class ZooModel(nn.Module, ABC):
    """A representation (`represent`) and a linear `classifier` on top of it."""

    classifier: nn.Linear

    @abstractmethod
    def represent(self, x: torch.Tensor) -> torch.Tensor:
        """What the classifier reads, flattened to (batch, features)."""

    def forward(self, x: torch.Tensor, with_features: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        features = self.represent(x)
        logits = self.classifier(features)
        return (logits, features) if with_features else logits


class MLP(ZooModel):
    """Two hidden layers of `width` ReLU units (200 by default)."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, width: int = 200) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Flatten(),
            nn.Linear(math.prod(input_shape), width),
            nn.ReLU(),
            nn.Linear(width, width),
            nn.ReLU(),
        )
        self.classifier = nn.Linear(width, num_classes)

    def represent(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


def cnn_feature_side(n: int) -> int:
    """Side of the CNN's last feature map for an n-pixel input side: conv3, pool2, conv3, pool2, conv3."""
    return ((n - 2) // 2 - 2) // 2 - 2


CNN_MIN_SIDE = next(n for n in range(1, 64) if cnn_feature_side(n) >= 1)  # 18: the smallest usable side


class CNN(ZooModel):
    """The TNA-PFN paper's small CNN: conv32-pool-conv64-pool-conv64, FC 64, no BatchNorm.

    Unpadded 3 x 3 convolutions as in the classic Keras CNN the authors' code follows:
    a 28 x 28 input ends as 64 x 3 x 3 features, a 32 x 32 input as 64 x 4 x 4.
    """

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(input_shape[0], 32, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 3),
            nn.ReLU(),
            nn.Flatten(),
        )
        self.fc = nn.Linear(64 * cnn_feature_side(input_shape[1]) * cnn_feature_side(input_shape[2]), 64)
        self.classifier = nn.Linear(64, num_classes)

    def represent(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.fc(self.features(x)))


class BasicBlock(nn.Module):
    """ResNet basic block with an option-A shortcut (stride and zero-padded channels, no parameters)."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.stride = stride
        self.extra_planes = planes - in_planes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        shortcut = x
        if self.stride != 1:
            shortcut = shortcut[:, :, :: self.stride, :: self.stride]
        if self.extra_planes:
            half = self.extra_planes // 2
            shortcut = F.pad(shortcut, (0, 0, 0, 0, half, self.extra_planes - half))
        return F.relu(out + shortcut)


class ResNet20(ZooModel):
    """CIFAR-style ResNet-20 (He et al. 2016): 3 stages x 3 basic blocks, 16/32/64 channels."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(input_shape[0], 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        blocks: list[nn.Module] = []
        in_planes = 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                blocks.append(BasicBlock(in_planes, planes, stride if i == 0 else 1))
                in_planes = planes
        self.layers = nn.Sequential(*blocks)
        self.classifier = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def represent(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layers(F.relu(self.bn1(self.conv1(x))))
        return torch.flatten(F.adaptive_avg_pool2d(out, 1), 1)


_VGG11_CONFIG: tuple[int | str, ...] = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGG11(ZooModel):
    """VGG-11 with BatchNorm for small images; a pool is skipped when the map is already 1 px."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels, height, width = input_shape
        for item in _VGG11_CONFIG:
            if item == "M":
                if height >= 2 and width >= 2:
                    layers.append(nn.MaxPool2d(2))
                    height, width = height // 2, width // 2
            else:
                layers += [nn.Conv2d(channels, int(item), 3, padding=1), nn.BatchNorm2d(int(item)), nn.ReLU()]
                channels = int(item)
        layers.append(nn.Flatten())
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(channels * height * width, num_classes)

    def represent(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


class WithProjectionHead(ZooModel):
    """A model's representation, a projection head (Linear, ReLU, Linear to `width`), a classifier.

    MOON (Li, He and Song, CVPR 2021; its authors' code and Flower Baselines' MOON) contrasts
    the projection head's output, which is also what the output layer reads; the paper's
    width is 256. The base model's own classifier is left out.
    """

    def __init__(self, base: ZooModel, width: int, num_classes: int) -> None:
        super().__init__()
        self.base = base
        features = base.classifier.in_features
        del base.classifier
        self.head = nn.Sequential(nn.Linear(features, features), nn.ReLU(), nn.Linear(features, width))
        self.classifier = nn.Linear(width, num_classes)

    def represent(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.base.represent(x))


_BUILDERS: dict[str, type[ZooModel]] = {"mlp": MLP, "cnn": CNN, "resnet20": ResNet20, "vgg11": VGG11}
