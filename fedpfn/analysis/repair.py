"""REPAIR (Jordan et al. 2023, arXiv 2211.08403): renormalise an interpolated model's hidden units.

Between two models without normalisation layers, the interpolated model's hidden units can lose
most of their variance (two unrelated units averaged), so its loss rises for a reason that is not
the weights' position as such: variance collapse. REPAIR measures, on fixed training batches,
each hidden unit's pre-activation mean and standard deviation in both end points, and rescales
that unit in the interpolated model so that its mean and std are the interpolation of the end
points' ((1 - a) mu_A + a mu_B, likewise sigma). The correction is folded into the layer's weight
and bias, layer by layer in forward order, each layer measured after the ones before it were
corrected (one forward pass, on at most SAMPLES of the fixed training samples). A barrier that
REPAIR removes was variance collapse; one that stays is not.

Hidden units are the output channels of every Linear and Conv2d layer except the classifier.
BatchNorm models get their running statistics recomputed on the same batches instead
(`reset_bn_stats`, for every measured model), which plays REPAIR's role for them:
`repair_problem` says so and nothing is computed twice. Models with other normalisation (the
ViT's LayerNorm) or bias-free hidden layers are refused with one line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
from torch import nn

StateDict = dict[str, torch.Tensor]
Stats = list[tuple[torch.Tensor, torch.Tensor]]  # per hidden layer: (mean, std) per unit, float64

BATCHNORM = (
    "BatchNorm statistics recomputed on fixed training batches (reset_bn_stats): "
    "REPAIR's role, not computed twice"
)
SAMPLES = 512  # fixed training samples REPAIR measures on, in one pass (a conv channel: x its map's size)
OTHER_NORMS = (nn.LayerNorm, nn.GroupNorm, nn.modules.instancenorm._InstanceNorm, nn.LocalResponseNorm)


# --------------------------------------------------------------------------- BatchNorm


def _batchnorms(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def has_batchnorm(model: nn.Module) -> bool:
    return bool(_batchnorms(model))


@torch.no_grad()
def reset_bn_stats(model: nn.Module, x: torch.Tensor, batches: Sequence[torch.Tensor]) -> None:
    """Recompute BatchNorm running statistics as the plain average over `batches` of `x`.

    Momentum None makes the running estimate a cumulative average; train mode, no gradients.
    """
    norms = _batchnorms(model)
    if not norms:
        return
    saved = [(m, m.momentum) for m in norms]
    was_training = model.training
    device = next(model.parameters()).device
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    try:
        for batch in batches:
            model(x[batch.to(x.device)].to(device))
    finally:
        for m, momentum in saved:
            m.momentum = momentum
        model.train(was_training)


# --------------------------------------------------------------------------- REPAIR


def hidden_layers(model: nn.Module) -> list[nn.Module]:
    """Every Linear and Conv2d but the classifier, in registration (here: forward) order."""
    layers = [m for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    classifier = getattr(model, "classifier", layers[-1] if layers else None)
    return [m for m in layers if m is not classifier]


def repair_problem(model: nn.Module) -> str | None:
    """Why REPAIR does not apply to `model`, in one line; None where it does (the MLP and the CNN)."""
    name = type(model).__name__
    if has_batchnorm(model):
        return f"{name} has BatchNorm: {BATCHNORM}"
    if other := next((m for m in model.modules() if isinstance(m, OTHER_NORMS)), None):
        return (f"{name} has {type(other).__name__}: REPAIR here renormalises models of Linear and Conv2d "
                "layers without normalisation (mlp, cnn)")  # fmt: skip
    layers = hidden_layers(model)
    if not layers:
        return f"{name} has no hidden Linear or Conv2d layer to renormalise"
    if any(layer.bias is None for layer in layers):
        return f"{name} has a hidden layer without a bias, which REPAIR's shift needs"
    return None


def sample(x: torch.Tensor, batches: Sequence[torch.Tensor]) -> torch.Tensor:
    """The inputs REPAIR measures on: the fixed batches' samples in order, at most SAMPLES of them."""
    return x[torch.cat(list(batches))[:SAMPLES].to(x.device)]


def note(model: nn.Module, batches: Sequence[torch.Tensor]) -> str:
    """What the REPAIR figures are for `model` with these fixed batches, or why there are none."""
    problem = repair_problem(model)
    if problem and has_batchnorm(model) and not batches:
        return "BatchNorm statistics not recomputed (no fixed training batches), and no REPAIR"
    if problem or not batches:
        return problem or "not computed: no fixed training batches"
    samples = min(SAMPLES, sum(len(b) for b in batches))
    return f"hidden units renormalised to the end points' statistics on {samples} fixed training samples"


def _moments(output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each channel's mean and population std (as float64) over the batch and every map position."""
    var, mean = torch.var_mean(output.detach(), dim=[0, *range(2, output.dim())], correction=0)
    return mean.double(), var.double().sqrt()


@torch.no_grad()
def _one_pass(model: nn.Module, x: torch.Tensor, hook_for: Callable[[int, nn.Module], Callable]) -> None:
    """One forward pass of `x` in eval mode with `hook_for(i, layer)` on every hidden layer."""
    layers = hidden_layers(model)
    handles = [layer.register_forward_hook(hook_for(i, layer)) for i, layer in enumerate(layers)]
    was_training = model.training
    model.eval()
    try:
        model(x.to(next(model.parameters()).device))
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)


def unit_stats(model: nn.Module, x: torch.Tensor) -> Stats:
    """Per hidden layer, each unit's pre-activation mean and std on `x` (every map position counted)."""
    stats: Stats = []
    _one_pass(model, x, lambda i, layer: lambda _m, _i, output: stats.append(_moments(output)))
    return stats


def targets(stats_a: Stats, stats_b: Stats, alpha: float) -> Stats:
    """The interpolated end points' statistics: (1 - a) mu_A + a mu_B and (1 - a) sigma_A + a sigma_B."""
    return [
        (torch.lerp(mean_a, mean_b, alpha), torch.lerp(std_a, std_b, alpha))
        for (mean_a, std_a), (mean_b, std_b) in zip(stats_a, stats_b)
    ]


def repaired(model: nn.Module, state: StateDict, wanted: Stats, x: torch.Tensor) -> StateDict:
    """`state` with each hidden unit rescaled to the `wanted` mean and std on `x`.

    One pass, in forward order: each layer's output is measured after the layers before it were
    corrected, its correction folded into its weight and bias and applied to the output the next
    layer reads. A unit of std 0 (dead on every sample) keeps its scale and is only shifted.
    Raises ValueError (one line) where REPAIR does not apply.
    """
    if problem := repair_problem(model):
        raise ValueError(f"REPAIR: {problem}")
    model.load_state_dict(state)

    def hook_for(i: int, layer: nn.Module) -> Callable:
        def correct(_module: nn.Module, _inputs: object, output: torch.Tensor) -> torch.Tensor:
            mean, std = _moments(output)
            target_mean, target_std = wanted[i]
            scale = torch.where(std > 0, target_std / std.clamp_min(1e-300), torch.ones_like(std))
            shift = target_mean - scale * mean
            shape = (-1, *[1] * (layer.weight.dim() - 1))
            layer.weight.mul_(scale.to(layer.weight.dtype).view(shape))
            layer.bias.copy_((layer.bias.double() * scale + shift).to(layer.bias.dtype))
            view = (1, -1, *[1] * (output.dim() - 2))
            return torch.addcmul(shift.to(output.dtype).view(view), output, scale.to(output.dtype).view(view))

        return correct

    _one_pass(model, x, hook_for)
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def repaired_path(
    model: nn.Module, state_a: StateDict, state_b: StateDict, inner: Iterable[tuple[float, StateDict]],
    x: torch.Tensor,
) -> Iterator[StateDict]:  # fmt: skip
    """Each interpolated state of `inner` ((a, state) pairs between A and B) REPAIRed towards the
    end points' statistics at its a, on inputs `x` (`sample`); the end points are measured once, first."""
    ends = []
    for state in (state_a, state_b):
        model.load_state_dict(state)
        ends.append(unit_stats(model, x))
    for alpha, state in inner:
        yield repaired(model, state, targets(ends[0], ends[1], alpha), x)
