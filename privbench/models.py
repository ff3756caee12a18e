"""Models (all without BatchNorm, so per-sample gradients are well defined) and the flat view.

* `lenet`: the LeNet with sigmoid activations of DLG / iDLG (Zhu et al. 2019, Zhao et al. 2020):
  three 5x5 convolutions of 12 channels (strides 2, 2, 1) and one linear layer.
* `lenet5`: LeNet-5 (ReLU, max-pool), a choice of this implementation for DPDL's MNIST "LeNet"
  (DPDL paper, Sec. VI-A: two convolutions with max-pooling, then fully connected layers).
* `cnn`: the FedAvg CNN (McMahan et al. 2017): conv5x5(32)-ReLU-pool2, conv5x5(64)-ReLU-pool2,
  FC(512)-ReLU, FC(classes); stands in for the unspecified 2-conv CNNs of ADP-VRSGP (Sec. 6) and
  Dyn-D2P (Sec. 5.1) and for DeFL-VP, which names no model.
* `mlp`: fully connected, hidden widths and activation configurable (DPPS's MLP, Sec. 5.4, uses
  tanh layers).
* `resnet`: a small pre-activation-free ResNet (3 stages of one BasicBlock) with GroupNorm.

A `FlatModel` maps between a `(d,)` parameter vector and the module's named parameters, so the
engine can stack n nodes as `(n, d)` and call the module functionally under `vmap`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import functional_call

from privbench.errors import ConfigError
from privbench.registry import MODELS

Shape = tuple[int, ...]


@MODELS.register("lenet")
def lenet(input_shape: Shape, num_classes: int) -> nn.Module:
    """DLG's LeNet (sigmoid): the canonical target of gradient inversion."""
    act = nn.Sigmoid
    body = nn.Sequential(
        nn.Conv2d(input_shape[0], 12, 5, stride=2, padding=2), act(),
        nn.Conv2d(12, 12, 5, stride=2, padding=2), act(),
        nn.Conv2d(12, 12, 5, stride=1, padding=2), act(),
    )
    return _with_head(body, input_shape, (), num_classes)


def _with_head(body: nn.Sequential, input_shape: Shape, head: Sequence[int],
               num_classes: int) -> nn.Sequential:
    """Append Flatten + ReLU-separated Linear layers, sized by a dry run of `body`."""
    with torch.no_grad():
        width = body(torch.zeros(1, *input_shape)).numel()
    layers: list[nn.Module] = [nn.Flatten()]
    for a, b in zip([width, *head], head, strict=False):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(([width, *head])[-1], num_classes))
    return nn.Sequential(*body, *layers)


@MODELS.register("lenet5")
def lenet5(input_shape: Shape, num_classes: int) -> nn.Module:
    """LeNet-5 (ReLU, max-pool); the second conv is padded for small (< 16 px) images."""
    c, h, _ = input_shape
    body = nn.Sequential(
        nn.Conv2d(c, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5, padding=0 if h >= 16 else 2), nn.ReLU(), nn.MaxPool2d(2),
    )
    return _with_head(body, input_shape, (120, 84), num_classes)


@MODELS.register("cnn")
def cnn(input_shape: Shape, num_classes: int) -> nn.Module:
    """The FedAvg CNN: two 5x5 conv + max-pool blocks, FC(512), FC(classes)."""
    body = nn.Sequential(
        nn.Conv2d(input_shape[0], 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
    )
    return _with_head(body, input_shape, (512,), num_classes)


_ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh,
                                                     "sigmoid": nn.Sigmoid}


def make_mlp(input_shape: Shape, num_classes: int, hidden: Sequence[int] = (128, 64),
             activation: str = "relu") -> nn.Module:
    """An MLP with the given hidden widths and activation (relu, tanh, sigmoid)."""
    if activation not in _ACTIVATIONS:
        raise ConfigError(f"unknown activation {activation!r}; accepted: {', '.join(_ACTIVATIONS)}")
    widths = [math.prod(input_shape), *hidden]
    layers: list[nn.Module] = [nn.Flatten()]
    for a, b in itertools.pairwise(widths):
        layers += [nn.Linear(a, b), _ACTIVATIONS[activation]()]
    layers.append(nn.Linear(widths[-1], num_classes))
    return nn.Sequential(*layers)


@MODELS.register("mlp")
def mlp(input_shape: Shape, num_classes: int) -> nn.Module:
    """MLP with hidden widths (128, 64) and ReLU."""
    return make_mlp(input_shape, num_classes)


class _Block(nn.Module):
    """ResNet BasicBlock with GroupNorm."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.gn1 = nn.GroupNorm(min(8, cout), cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.gn2 = nn.GroupNorm(min(8, cout), cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.GroupNorm(min(8, cout), cout))

    def forward(self, x: Tensor) -> Tensor:
        out = torch.relu(self.gn1(self.conv1(x)))
        return torch.relu(self.gn2(self.conv2(out)) + self.short(x))


@MODELS.register("resnet")
def resnet(input_shape: Shape, num_classes: int, width: int = 16) -> nn.Module:
    """A small ResNet (3 stages, one BasicBlock each, widths w, 2w, 4w) with GroupNorm.

    Its layers (`FlatModel.layers`) are ResNet-18's convolutional blocks as the DPPS paper's
    PartPSP splits count them (Sec. 5.4): the stem with stage 1, stage 2, then stage 3 with the
    classifier.
    """
    c = input_shape[0]
    net = nn.Sequential(
        nn.Conv2d(c, width, 3, 1, 1, bias=False), nn.GroupNorm(min(8, width), width), nn.ReLU(),
        _Block(width, width, 1), _Block(width, 2 * width, 2), _Block(2 * width, 4 * width, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, num_classes),
    )
    net.layer_prefixes = (("0.", "1.", "3."), ("4.",), ("5.", "8."))  # names as in the Sequential
    return net


@dataclass(frozen=True)
class ParamSpec:
    """Name, shape and position of one parameter tensor inside the flat vector."""

    name: str
    shape: tuple[int, ...]
    start: int
    stop: int


class FlatModel:
    """A module used functionally through a flat `(d,)` parameter vector.

    Args:
        module: the architecture (its own parameters are only the template; never trained).
    """

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.specs: list[ParamSpec] = []
        start = 0
        for name, p in module.named_parameters():
            self.specs.append(ParamSpec(name, tuple(p.shape), start, start + p.numel()))
            start += p.numel()
        self.d = start
        # on the CPU the engine's non-private batch step loops over the nodes of a conv model
        self.convolutional = any(isinstance(m, nn.modules.conv._ConvNd) for m in module.modules())

    def unflatten(self, flat: Tensor) -> dict[str, Tensor]:
        """(d,) -> {name: tensor of the parameter's shape} (views, vmap-friendly)."""
        return {s.name: flat[s.start:s.stop].view(s.shape) for s in self.specs}

    def flatten(self, params: dict[str, Tensor]) -> Tensor:
        """{name: tensor} -> (d,)."""
        return torch.cat([params[s.name].reshape(-1) for s in self.specs])

    def forward(self, flat: Tensor, x: Tensor) -> Tensor:
        """Logits of inputs x (B, C, H, W) under parameters flat (d,)."""
        return functional_call(self.module, self.unflatten(flat), (x,))

    def init(self, gen: torch.Generator) -> Tensor:
        """A (d,) initialisation drawn from `gen` with PyTorch's default per-layer scheme."""
        state = torch.random.get_rng_state()
        try:
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
            for m in self.module.modules():
                if hasattr(m, "reset_parameters") and m is not self.module:
                    m.reset_parameters()
        finally:
            torch.random.set_rng_state(state)
        return self.flatten(dict(self.module.named_parameters())).detach().clone()

    @property
    def layers(self) -> list[tuple[str, ...]]:
        """The model's layers, input side first, each as parameter-name prefixes: what "the
        first k layers" of a split counts (DPPS paper, Sec. 5.4). A model may declare them
        (`layer_prefixes` on the module: a ResNet's layer is a convolutional block); otherwise
        each parameterised module is one layer (an MLP's Linear, a CNN's conv)."""
        declared = getattr(self.module, "layer_prefixes", None)
        if declared is not None:
            return [tuple(group) for group in declared]
        out: list[tuple[str, ...]] = []
        for s in self.specs:
            group = (s.name.rsplit(".", 1)[0] + ".",)
            if group not in out:
                out.append(group)
        return out

    def slice_of(self, prefixes: Sequence[str]) -> Tensor:
        """(d,) bool mask of the parameters whose names start with any of `prefixes`."""
        mask = torch.zeros(self.d, dtype=torch.bool)
        for s in self.specs:
            if any(s.name.startswith(p) for p in prefixes):
                mask[s.start:s.stop] = True
        return mask

    def to(self, device: torch.device) -> FlatModel:
        """Move the template module (and its buffers) to `device`."""
        self.module.to(device)
        return self


def build_model(name: str, input_shape: Shape, num_classes: int) -> FlatModel:
    """Build a registered model for the dataset's shape, with a clear error when it cannot fit."""
    builder = MODELS.get(name)
    try:
        module = builder(tuple(input_shape), num_classes)
        with torch.no_grad():
            module(torch.zeros(1, *input_shape))
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(f"model {name!r} does not fit inputs of shape {tuple(input_shape)}: "
                          f"{first}") from None
    return FlatModel(module)


@MODELS.register("psp_mlp")
def psp_mlp(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The MLP of the DPPS paper (Zhou, Xue, Chen 2025, Sec. 5.4): D->10, 10->D, D->classes, tanh
    after every layer (logits too); DPPS / PartPSP share its first layers."""
    d = math.prod(input_shape)
    return nn.Sequential(nn.Flatten(), nn.Linear(d, 10), nn.Tanh(), nn.Linear(10, d), nn.Tanh(),
                         nn.Linear(d, num_classes), nn.Tanh())
