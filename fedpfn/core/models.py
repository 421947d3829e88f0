"""Model zoo for the simulations.

Every model is a representation followed by a final Linear layer in an attribute named
``classifier``: anchoring options include or leave out the output layer by name, and
``model(x, with_features=True)`` also returns the representation the classifier reads
(what MOON contrasts), so that one functional call gives both.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedpfn.core.settings import ConfigError, setting
from fedpfn.core.training import free_memory
from fedpfn.core.user_code import USER_FAULTS, import_user_function, is_code, user_fault

MODELS = ("mlp", "cnn", "resnet20", "vgg11", "vit_tiny28")  # each has a class in _BUILDERS at the end
VIT_TINY28_PATCH = 4  # vit_tiny28's patch side
MAX_PROJECTION_HEAD = 8192  # 32 times MOON's 256; a billion asked a DefaultCPUAllocator for 800 GB
TIMM_PREFIX = "timm:"  # timm:NAME builds timm's vision transformer NAME without weights (TimmViT)


def model_problem(name: str) -> str | None:
    """Why `name` is not a model the zoo builds (one of MODELS or timm:NAME of a timm ViT), or None.

    A timm name is looked up without building anything (timm is imported only for it).
    """
    if name in MODELS or is_code(name):  # a user's builder is checked where it is called (user_model)
        return None
    if not name.startswith(TIMM_PREFIX):
        return (
            f"unknown model '{name}'; use one of {', '.join(MODELS)}, {TIMM_PREFIX}NAME for a timm vision "
            "transformer, or package.module:function for your own"
        )
    from timm.models import get_arch_name, is_model, is_model_in_modules

    arch = name[len(TIMM_PREFIX) :]
    if not is_model(arch):
        return f"timm has no model '{arch}' (timm.list_models('vit_*') lists its vision transformers)"
    if not is_model_in_modules(get_arch_name(arch), ["vision_transformer"]):
        return f"{name} is not one of timm's VisionTransformer models (timm.models.vision_transformer); use a vit_* name"
    return None


@dataclass(frozen=True)
class ModelChoice:
    """The architecture an analysis command trains (pretrain) or fine-tunes (soup): a zoo model, timm:NAME
    or a user's builder, checked by model_problem; declared once for both."""

    model: str = setting("vit_tiny28", "a zoo model (vit_tiny28, cnn, ...) or timm:NAME", model_problem)


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
    problem = model_problem(name)
    if problem:
        raise ValueError(problem)
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
    if name == "vit_tiny28" and min(shape[1:]) < VIT_TINY28_PATCH:
        raise ValueError(
            f"vit_tiny28 needs images of at least {VIT_TINY28_PATCH} x {VIT_TINY28_PATCH} pixels (one patch), "
            f"got {shape[1]} x {shape[2]}"
        )
    if not 0 <= projection_head <= MAX_PROJECTION_HEAD:  # checked before anything is allocated
        raise ValueError(f"projection_head={projection_head}: give 0 (none) to {MAX_PROJECTION_HEAD}")
    if width and name != "mlp":
        raise ValueError(f"width={width}: only the mlp takes a hidden width; leave it 0 for {name}")
    if is_code(name):
        model: ZooModel = user_model(name, shape, num_classes)
    elif name.startswith(TIMM_PREFIX):
        model = TimmViT.named(name[len(TIMM_PREFIX) :], shape, num_classes)
    else:
        model = MLP(shape, num_classes, width) if width else _BUILDERS[name](shape, num_classes)
    return WithProjectionHead(model, projection_head, num_classes) if projection_head else model


def user_model(path: str, input_shape: tuple[int, int, int], num_classes: int) -> ZooModel:
    """`--model package.module:build`: `build(input_shape, num_classes)` must return a ZooModel (a
    `represent` method and a Linear `classifier` of `num_classes` outputs) whose forward maps a
    float32 batch (N, C, H, W) to logits (N, num_classes). ConfigError, one line, where it does not."""
    build = import_user_function(path, "model", "model builder")
    contract = (
        f"model: {path}({input_shape}, {num_classes}) must return a fedpfn.core.models.ZooModel (a represent "
        f"method, a Linear classifier with {num_classes} outputs) mapping float32 (N, *{input_shape}) to (N, {num_classes})"
    )
    try:
        model = build(input_shape, num_classes)
    except USER_FAULTS as err:  # a user's builder may raise anything, SystemExit too
        line = f"model: {path}({input_shape}, {num_classes}) raised {type(err).__name__}: {err}"
        raise user_fault(err, line) from None
    classifier = getattr(model, "classifier", None)
    if not isinstance(model, ZooModel) or not isinstance(classifier, nn.Linear) or classifier.out_features != num_classes:
        raise ConfigError(f"{contract}; it returned {type(model).__name__}")
    if next(model.parameters()).is_meta:  # a check of names and shapes (fedpfn.core.personal): nothing to run
        if torch.get_default_device().type != "meta":  # asked for weights, it gave none
            raise ConfigError(f"{contract}; it returned a model on the meta device, which holds no weights to train")
        return model
    try:
        with torch.no_grad():
            logits = model(torch.zeros(2, *input_shape))
    except USER_FAULTS as err:
        raise user_fault(err, f"{contract}; its forward raised {type(err).__name__}: {err}") from None
    if not (isinstance(logits, torch.Tensor) and logits.is_floating_point() and logits.shape == (2, num_classes)):
        shown = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ConfigError(f"{contract}; its forward gave {shown} for a batch of 2")
    return model


EVAL_TRIAL = 256  # the examples of the evaluation batch a user's model is tried on (evaluate's batch)


def try_on_data(model: nn.Module, path: str, train: tuple[torch.Tensor, torch.Tensor], test_x: torch.Tensor) -> None:
    """A user's model (`path`) run on real data as the run will run it, before anything is written:
    one training batch forward and backward in train mode, one evaluation batch in eval mode (the
    check at construction saw 2 zeros only: a reshape fixed to that batch, or a dtype or range it
    assumed, pass it). ConfigError, one line naming `path`, where it raises or gives logits of
    another shape. `model` is the caller's to throw away; the caller's random draws are kept."""
    x, y = train
    classes = int(model.classifier.out_features)

    def trained() -> torch.Tensor:
        model.train()
        logits = model(x, with_features=True)[0]
        F.cross_entropy(logits, y).backward()
        return logits

    def evaluated() -> torch.Tensor:
        model.eval()
        with torch.no_grad():
            return model(test_x)

    with torch.random.fork_rng(devices=[]):  # dropout draws from the global stream
        for batch, size, run in ((f"a training batch of {len(x)}", len(x), trained),
                                 (f"an evaluation batch of {len(test_x)}", len(test_x), evaluated)):  # fmt: skip
            try:
                logits = run()
            except USER_FAULTS as err:  # a user's forward may raise anything, SystemExit too
                line = f"model: {path} fails on {batch} of the run's data: {type(err).__name__}: {err}"
                raise user_fault(err, line) from None
            if (shape := tuple(getattr(logits, "shape", ()))) != (size, classes):
                line = f"model: {path} gives logits {shape} for {batch} of the run's data, not ({size}, {classes})"
                raise ConfigError(line)


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


class TimmViT(ZooModel):
    """A timm VisionTransformer in the zoo's contract: its `head` becomes `classifier`.

    The transformer (`net`) keeps timm's parameter names below `net.`; `represent` is timm's
    pre-logits output (the pooled, normalised class token). A state dict saved by timm itself
    (`head.*` and unprefixed names) reads through `file_name`. The class token, position
    embedding and LayerNorms are trainable parameters, so anchors and the local step see them.
    """

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        head = net.head
        net.head = nn.Identity()
        self.net = net
        self.classifier = head  # registered last: the state dict reads body first, as timm's does

    def represent(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    @staticmethod
    def file_name(name: str) -> str:
        """The name a timm-saved tensor has here."""
        return "classifier." + name[len("head.") :] if name.startswith("head.") else "net." + name

    @classmethod
    def named(cls, arch: str, input_shape: tuple[int, int, int], num_classes: int) -> TimmViT:
        """timm's `arch` built without weights for these inputs (nothing is downloaded)."""
        import timm

        channels, height, width = input_shape
        kwargs = {"pretrained": False, "num_classes": num_classes, "img_size": (height, width), "in_chans": channels}
        with torch.device("meta"):  # sized first, allocating nothing: one past this machine's memory is refused
            params = sum(p.numel() for p in timm.create_model(arch, **kwargs).parameters())
        free, where = free_memory("cpu")
        if params * 4 > free:  # its float32 weights alone, built on the CPU
            size = f"{params:,} parameters, {params * 4 / 1e9:.1f} GB as float32"
            more = f"more than the {free / 1e9:.1f} GB {where}"
            raise ConfigError(f"model: {TIMM_PREFIX}{arch} has {size}, {more}; choose a smaller model")
        return cls(timm.create_model(arch, **kwargs))

    @classmethod
    def tiny28(cls, input_shape: tuple[int, int, int], num_classes: int) -> TimmViT:
        """`vit_tiny28`: patch 4, width 48, 3 blocks of 3 heads, MLP ratio 2 (61 k parameters at
        28 x 28): about 1,600 training samples a second on one CPU thread here."""
        from timm.models.vision_transformer import VisionTransformer

        channels, height, width = input_shape
        net = VisionTransformer(
            img_size=(height, width), patch_size=VIT_TINY28_PATCH, in_chans=channels, num_classes=num_classes,
            embed_dim=48, depth=3, num_heads=3, mlp_ratio=2.0,
        )  # fmt: skip
        return cls(net)


_BUILDERS: dict[str, Callable[[tuple[int, int, int], int], ZooModel]] = {
    "mlp": MLP, "cnn": CNN, "resnet20": ResNet20, "vgg11": VGG11, "vit_tiny28": TimmViT.tiny28,
}  # fmt: skip
