"""Tests for fedpfn.core.models: shapes, the named classifier, gradients, normalisation layers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedpfn.core import models
from fedpfn.core.models import MODELS, build_model

SHAPES = [((1, 28, 28), 10), ((3, 32, 32), 100)]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize(("input_shape", "num_classes"), SHAPES)
def test_forward_backward(name: str, input_shape: tuple[int, int, int], num_classes: int) -> None:
    torch.manual_seed(0)
    model = build_model(name, input_shape, num_classes)
    assert isinstance(model.classifier, nn.Linear)
    assert model.classifier.out_features == num_classes
    x = torch.randn(4, *input_shape)
    out = model(x)
    assert out.shape == (4, num_classes)
    nn.functional.cross_entropy(out, torch.arange(4) % num_classes).backward()
    for pname, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), pname
    assert model.classifier.weight.grad.abs().sum() > 0


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def test_normalisation_layers() -> None:
    assert not has_batchnorm(build_model("cnn", (3, 32, 32), 10))
    assert not has_batchnorm(build_model("mlp", (1, 28, 28), 10))
    assert has_batchnorm(build_model("resnet20", (3, 32, 32), 10))
    assert has_batchnorm(build_model("vgg11", (1, 28, 28), 10))


def test_cnn_layout() -> None:
    convs = [m for m in build_model("cnn", (1, 28, 28), 10).modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [32, 64, 64]
    assert all(c.kernel_size == (3, 3) for c in convs)


def test_resnet20_depth() -> None:
    model = build_model("resnet20", (3, 32, 32), 10)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) + 1 == 20  # 19 convolutions plus the classifier
    assert sum(p.numel() for p in model.parameters()) < 300_000  # ~0.27 M, the CIFAR ResNet-20


def test_unknown_model_raises() -> None:
    with pytest.raises(ValueError, match="unknown model 'resnet50'.*mlp, cnn, resnet20, vgg11"):
        build_model("resnet50", (3, 32, 32), 10)


def test_cnn_refuses_images_smaller_than_it_can_take() -> None:
    """Three unpadded 3 x 3 convolutions and two pools leave 1 x 1 features from 18 x 18, nothing from 17."""
    assert models.CNN_MIN_SIDE == 18
    assert build_model("cnn", (1, 18, 18), 10)(torch.zeros(2, 1, 18, 18)).shape == (2, 10)
    for shape in ((1, 17, 17), (3, 28, 17)):
        with pytest.raises(ValueError, match=rf"at least 18 x 18 pixels .* got {shape[1]} x {shape[2]}; use mlp"):
            build_model("cnn", shape, 10)


@pytest.mark.parametrize("name", [m for m in MODELS if m not in ("cnn", "vit_tiny28")])
def test_other_models_take_any_image_size(name: str) -> None:
    model = build_model(name, (1, 1, 1), 10).train()
    assert model(torch.zeros(2, 1, 1, 1)).shape == (2, 10)


def test_every_model_name_has_a_builder() -> None:
    assert tuple(models._BUILDERS) == MODELS


@pytest.mark.parametrize("name", ["mlp", "cnn", "resnet20"])
def test_a_projection_head_is_what_the_classifier_reads_and_what_moon_contrasts(name):
    model = build_model(name, (1, 28, 28), 10, projection_head=256)
    logits, features = model(torch.zeros(3, 1, 28, 28), with_features=True)
    assert logits.shape == (3, 10) and features.shape == (3, 256)
    assert model.classifier.in_features == 256 and not hasattr(model.base, "classifier")
    assert {"head.0.weight", "head.2.weight"} <= {n for n, _ in model.named_parameters()}


# --- vision transformers (timm) ---------------------------------------------------------------


def test_the_small_vit_trains_a_step_and_keeps_its_anchors_exact() -> None:
    """LayerNorms, the class token and the position embedding are parameters: anchored like any other."""
    from fedpfn.core.anchors import draw_mask
    from fedpfn.core.training import OptimizerSpec, train_local

    torch.manual_seed(0)
    model = build_model("vit_tiny28", (1, 28, 28), 10)
    assert isinstance(model.classifier, nn.Linear) and model.represent(torch.zeros(2, 1, 28, 28)).shape == (2, 48)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    mask = draw_mask(model, 0.4, seed=1)
    assert {"net.cls_token", "net.pos_embed", "net.blocks.0.norm1.weight", "classifier.weight"} <= set(mask)
    x, y = torch.randn(16, 1, 28, 28), torch.arange(16) % 10
    spec = OptimizerSpec("adam", 1e-2, weight_decay=0.1)
    train_local(model, x, y, iter([torch.arange(8), torch.arange(8, 16)]), spec, mask)
    for name, p in model.named_parameters():
        assert torch.equal(p.detach()[mask[name]], start[name][mask[name]]), name
        assert not torch.equal(p.detach(), start[name]), f"{name} did not train"


def test_a_timm_vit_name_builds_without_weights_and_others_are_refused() -> None:
    model = build_model("timm:vit_tiny_patch16_224", (3, 32, 32), 7)
    assert model.classifier.out_features == 7 and model.net.pos_embed.shape == (1, 5, 192)  # 2 x 2 patches + cls
    assert model(torch.zeros(1, 3, 32, 32)).shape == (1, 7)
    for name, reason in (("timm:resnet18", "not one of timm's VisionTransformer"), ("timm:nope", "timm has no model")):
        assert reason in models.model_problem(name)
        with pytest.raises(ValueError, match=reason):
            build_model(name, (3, 32, 32), 10)
    with pytest.raises(ValueError, match="vit_tiny28 needs images of at least 4 x 4"):
        build_model("vit_tiny28", (1, 3, 3), 10)
