"""Per-sample clipping without per-sample gradients, for all parameter rows at once.

DP-SGD needs, for every sample i of every row (node, or DPDL edge) m, the norm of its whole
gradient ||g_mi|| and then the clipped sum sum_i c_mi g_mi, c_mi = min(1, C / ||g_mi||). Both
come here from one forward and one backward pass per row, all rows in one `vmap` (no loop over
rows or samples), without forming the (m, B, d) per-sample stack:

* the backward differentiates w.r.t. zero tensors added to every parametrised layer's output
  ("probes"), so it yields each layer's per-sample output gradients e (m, B, ..., q) and, through
  forward hooks, its inputs a (m, B, ..., p); no weight gradient is computed in the pass;
* Linear (and Conv2d seen through im2col: a -> U (T, p = C·k)): per-sample weight gradient
  G_i = e_i^T a_i. Linear: ghost norm ||e_i||^2 ||a_i||^2 (T = 1; Li et al. 2022), or for
  T > 1 the cheaper of the T x T Gram matrices <a_i a_i^T, e_i e_i^T> and G_i formed (as Bu,
  Wang, Zha, Karypis 2023, "book-keeping", mixed ghost norm, choose). Conv2d: the cheapest of
  three exact ways by multiply-adds (`conv_norm_way`): G_i formed (T p q), the im2col Gram
  U_i U_i^T (T^2 p), or the same Gram without im2col, mapped from the pixel Gram X_i^T X_i
  (S x S over the S input pixels: S^2 C + k T^2; `_patch_gram`); the Grams against e_i e_i^T.
  Bias: ||sum_t e_it||^2;
* GroupNorm (affine): per-sample gradients are small (2 x channels), formed directly;
* any other layer with parameters: per-sample gradients of that layer's own parameters only, by
  `vmap(vmap(vjp))` of the layer on its captured input and output gradient (exact, local);
* the clipped sum, per layer, is one weighted product: (c * E)^T A over all B·T rows of a row
  (book-keeping); for Conv2d the weight gradient of the clip-weighted output gradients c * e,
  one grouped convolution backward for all rows; or the c-weighted sum of the formed G.

Models whose parametrised modules also have children, are called more than once (shared
weights), or take several inputs fall back to `vmap(vmap(grad))` per-sample gradients for the
whole model (`FastClip.build` returns None). Sources: Goodfellow 2015 ("Efficient per-example
gradient computations"), Li et al. 2022 and Bu et al. 2023 above; equality with clip(per-sample
gradients) is tested to 1e-5.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypedDict

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad, vjp, vmap

from privbench.models import Shape

# One layer's contribution: (m, B) squared norms and, given the (m, B) clip weights, the
# clipped sums {parameter name: (m, *shape)}.
Contribution = tuple[Tensor, Callable[[Tensor], dict[str, Tensor]]]


class _ProbeState(TypedDict, total=False):
    """What `FastClip.probes`' hooks share with the traced loss of one row."""

    probes: list[Tensor]  # added to each layer's output: its gradient is e
    acts: list[Tensor | None]  # each layer's input a, recorded by its hook


@dataclass(frozen=True)
class Layer:
    """One parametrised module: its name prefix, rule, and per-sample input/output shapes."""

    name: str
    module: nn.Module
    rule: str  # key of RULES
    in_shape: Shape
    out_shape: Shape
    pooled: bool = False  # a MaxPool2d runs after it, before the next parametrised layer

    def param(self, local: str) -> str:
        """Flat-model name of this layer's parameter `local`."""
        return f"{self.name}.{local}" if self.name else local


def _direct_params(module: nn.Module) -> list[str]:
    return [k for k, _ in module.named_parameters(recurse=False)]


def _rule_for(module: nn.Module) -> str:
    """Fast rule of a module, else "generic" (per-layer vjp)."""
    if type(module) is nn.Linear:
        return "linear"
    if (type(module) is nn.Conv2d and module.groups == 1 and module.padding_mode == "zeros"
            and not isinstance(module.padding, str)):
        return "conv2d"
    if type(module) is nn.GroupNorm:
        return "group_norm"
    return "generic"


class FastClip:
    """The per-layer plan of one model for one per-sample input shape (holds the layers, not the
    root module, so the plan cache never keeps a model alive)."""

    def __init__(self, layers: list[Layer]) -> None:
        self.layers = layers

    @classmethod
    def build(cls, module: nn.Module, sample_shape: Shape) -> FastClip | None:
        """Dry-run one sample through `module` with hooks; None when no exact plan exists."""
        owners = [(n, m) for n, m in module.named_modules() if _direct_params(m)]
        if not owners or any(next(m.children(), None) is not None for _, m in owners):
            return None  # a module with parameters and children: its output gradient is not enough
        seen: dict[str, list[tuple[Shape, Shape]]] = {n: [] for n, _ in owners}

        def recorder(name: str) -> Callable[..., None]:
            def hook(mod: nn.Module, inp: tuple[Any, ...], out: Any) -> None:
                ok = len(inp) == 1 and isinstance(inp[0], Tensor) and isinstance(out, Tensor)
                seen[name].append((tuple(inp[0].shape[1:]), tuple(out.shape[1:])) if ok else ())
            return hook

        order: list[str] = []  # leaf modules in the order they run
        leaves = [(n, m) for n, m in module.named_modules() if next(m.children(), None) is None]
        handles = [m.register_forward_hook(recorder(n)) for n, m in owners] + [
            m.register_forward_hook(lambda *_, n=n: order.append(n)) for n, m in leaves]
        try:
            with torch.no_grad():
                p = next(module.parameters())
                module(torch.zeros(1, *sample_shape, dtype=p.dtype, device=p.device))
        finally:
            for h in handles:
                h.remove()
        if any(len(s) != 1 or not s[0] for s in seen.values()):
            return None  # unused, shared or multi-input layers
        pooled = _pooled(order, dict(leaves), {n for n, _ in owners})
        return cls([Layer(n, m, _rule_for(m), *seen[n][0], n in pooled) for n, m in owners])

    @contextmanager
    def probes(self, state: _ProbeState) -> Iterator[None]:
        """Hooks that record each layer's input in state["acts"] and add state["probes"][k]."""
        def prober(k: int) -> Callable[..., Tensor]:
            last = self.layers[k].pooled  # its output pooled: lay it out channels-last

            def hook(mod: nn.Module, inp: tuple[Tensor, ...], out: Tensor) -> Tensor:
                state["acts"][k] = inp[0]
                out = out + state["probes"][k]
                return _channels_last(out) if last and out.device.type == "cpu" else out
            return hook

        handles = [lay.module.register_forward_hook(prober(k)) for k, lay in enumerate(self.layers)]
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    def capture(self, module: nn.Module, pdict: dict[str, Tensor], x: Tensor, y: Tensor,
                ) -> tuple[list[Tensor], list[Tensor]]:
        """Each layer's inputs a (m, B, *in_shape) and per-sample output gradients
        e (m, B, *out_shape) from one forward and one backward per row, all rows in one vmap."""
        m, b = y.shape
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        zeros = [zero.expand(m, b, *lay.out_shape) for lay in self.layers]  # never written
        state: _ProbeState = {}

        def row_loss(probes: list[Tensor], p: dict[str, Tensor], xb: Tensor, yb: Tensor,
                     ) -> tuple[Tensor, tuple[Tensor, ...]]:
            state["probes"], state["acts"] = probes, [None] * len(probes)
            logits = functional_call(module, p, (xb,))  # (B, classes)
            return F.cross_entropy(logits, yb, reduction="sum"), tuple(state["acts"])

        with self.probes(state):
            e, a = vmap(grad(row_loss, has_aux=True))(zeros, pdict, x, y)
        return list(a), list(e)


def _pooled(order: list[str], leaves: dict[str, nn.Module], owners: set[str]) -> set[str]:
    """Parametrised layers whose output reaches a MaxPool2d before the next parametrised layer
    (`order`: the leaf modules' names in the order a forward ran them)."""
    out, last = set(), None
    for n in order:
        if n in owners:
            last = n
        elif last is not None and type(leaves[n]) is nn.MaxPool2d:
            out.add(last)
    return out


def _channels_last(x: Tensor) -> Tensor:
    """x (N, C, H, W) laid out channels-last. On the CPU, torch's max pooling of small maps is
    about 10x faster channels-last than contiguous (512 x 32 x 8 x 8 -> 4 x 4 on one core:
    0.55 ms against 5.7 ms); the values are the same. Permutes, not .contiguous(memory_format),
    so that under vmap the layout is that of each row's (N, C, H, W)."""
    return x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2) if x.dim() == 4 else x


def _weighted(g: Tensor, c: Tensor) -> Tensor:
    """sum_b c_mb g_mb: g (m, B, *shape), c (m, B) -> (m, *shape), one (1 x B) @ (B x P) product
    per row (an einsum here picks a layout about 10x slower on the CPU)."""
    m, b = c.shape
    return torch.bmm(c[:, None].to(g.dtype), g.reshape(m, b, -1)).reshape(m, *g.shape[2:])


def _gram_core(a: Tensor, e: Tensor, weight: str, bias: str | None) -> Contribution:
    """Linear map per position: a (m, B, T, p), e (m, B, T, q) -> weight (q, p) and bias (q,)."""
    m, b, t, p = a.shape
    q = e.shape[-1]
    formed = t > 1 and t * (p + q) >= p * q  # Bu et al.: form G_i when cheaper than Grams
    if t == 1:
        sq = e.pow(2).sum(dim=(2, 3)) * a.pow(2).sum(dim=(2, 3))  # (m, B) ghost norm
    elif formed:
        g = e.transpose(-1, -2) @ a  # (m, B, q, p) per-sample weight gradients
        sq = g.pow(2).sum(dim=(2, 3))
    else:
        sq = ((a @ a.transpose(-1, -2)) * (e @ e.transpose(-1, -2))).sum(dim=(2, 3))  # T x T
    eb = e.sum(dim=2) if bias else None  # (m, B, q)
    if eb is not None:
        sq = sq + eb.pow(2).sum(dim=-1)

    def summed(c: Tensor) -> dict[str, Tensor]:
        if formed:
            w = _weighted(g, c)
        else:
            ec = (e * c[:, :, None, None]).reshape(m, b * t, q)  # (m, B·T, q)
            w = ec.transpose(1, 2) @ a.reshape(m, b * t, p)  # (m, q, p) book-keeping product
        out = {weight: w}
        if bias and eb is not None:
            out[bias] = torch.einsum("mbq,mb->mq", eb, c)
        return out

    return sq, summed


def _linear(lay: Layer, a: Tensor, e: Tensor) -> Contribution:
    m, b = a.shape[:2]
    mod = lay.module
    a3 = a.reshape(m, b, -1, mod.in_features)  # (m, B, T, p)
    e3 = e.reshape(m, b, -1, mod.out_features)  # (m, B, T, q)
    return _gram_core(a3, e3, lay.param("weight"), lay.param("bias") if mod.bias is not None
                      else None)


def _conv_costs(mod: nn.Conv2d, in_shape: Shape, out_shape: Shape) -> dict[str, int]:
    """Multiply-adds per sample of each exact way to a conv layer's per-sample gradient norm
    (C input channels, S = H·W input pixels, T output positions, p = C·k, q output channels):
    "formed" G_i = E_i^T U_i (T p q), "gram": the T x T Gram matrices of the im2col patches U_i
    and of E_i (Li et al. 2022; T p + T^2 (p + q)), "pixel": the same patch Gram mapped from
    the pixel Gram X_i^T X_i (S^2 C + k T^2 + T^2 q; `_patch_gram`)."""
    c, h, w = in_shape
    q, t = out_shape[0], math.prod(out_shape[1:])
    k = math.prod(mod.kernel_size)
    p = c * k
    return {"formed": t * p * (q + 1), "gram": t * p + t * t * (p + q),
            "pixel": (h * w) ** 2 * c + k * t * t + t * t * q}


def conv_norm_way(lay: Layer) -> str:
    """The cheapest exact way ("formed", "gram" or "pixel") to a conv layer's per-sample norms."""
    costs = _conv_costs(lay.module, lay.in_shape, lay.out_shape)
    return min(costs, key=costs.__getitem__)


Geometry = tuple[Shape, Shape, Shape, Shape, Shape, Shape]  # kernel, stride, padding,
# dilation, input (H, W), output (Ho, Wo)


@functools.lru_cache(maxsize=64)
def _pixel_to_patch(geometry: Geometry, dtype: torch.dtype, device: torch.device) -> Tensor:
    """The sparse 0/1 map M (T·T, S·S) with vec(U U^T) = M vec(X^T X) for one conv geometry.

    Patch t holds, at kernel offset j, input pixel src(t, j) = t·stride - padding + j·dilation
    (or a padding zero), so <U_t, U_t'> = sum_j P[src(t, j), src(t', j)] over the offsets
    where both pixels lie inside the image: at most k nonzeros per row."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), (h, w), (ho, wo) = geometry
    iy = (torch.arange(ho)[:, None] * sh - ph + torch.arange(kh)[None] * dh)[:, None, :, None]
    ix = (torch.arange(wo)[:, None] * sw - pw + torch.arange(kw)[None] * dw)[None, :, None, :]
    inside = ((iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)).reshape(ho * wo, kh * kw)  # (T, k)
    src = (iy * w + ix).reshape(ho * wo, kh * kw)  # (T, k) flat input pixel of patch t, offset j
    t = ho * wo
    both = inside[:, None, :] & inside[None, :, :]  # (T, T, k)
    rows = (torch.arange(t)[:, None, None] * t + torch.arange(t)[None, :, None]).expand_as(both)
    cols = src[:, None, :] * (h * w) + src[None, :, :]
    index = torch.stack([rows[both], cols[both]])
    ones = torch.ones(index.shape[1], dtype=dtype)
    m = torch.sparse_coo_tensor(index, ones, (t * t, h * w * h * w), check_invariants=True)
    return m.coalesce().to(device)


def _patch_gram(mod: nn.Conv2d, a: Tensor, out_hw: Shape) -> Tensor:
    """Gram matrices U_i U_i^T (N, T, T) of the im2col patches of a (N, C, H, W), without
    im2col: the pixel Gram P_i = X_i^T X_i (N, S, S) through the sparse map `_pixel_to_patch`
    (S^2 C + k T^2 multiply-adds against T^2 C k for the patches' own Gram)."""
    n, c, h, w = a.shape
    x = a.reshape(n, c, h * w)
    pix = (x.transpose(1, 2) @ x).reshape(n, h * w * h * w)  # (N, S·S)
    geometry = (tuple(mod.kernel_size), tuple(mod.stride), tuple(mod.padding),
                tuple(mod.dilation), (h, w), tuple(out_hw))
    m = _pixel_to_patch(geometry, a.dtype, a.device)  # (T·T, S·S)
    t = out_hw[0] * out_hw[1]
    return torch.sparse.mm(m, pix.T).T.reshape(n, t, t)


def _unfolded(mod: nn.Conv2d, a: Tensor) -> Tensor:
    """im2col patches of a (N, C, H, W): (N, T, C·k·k)."""
    return F.unfold(a, mod.kernel_size, mod.dilation, mod.padding, mod.stride).transpose(1, 2)


def _weight_grad(mod: nn.Conv2d, inp: Tensor, out: Tensor, groups: int) -> Tensor:
    """Weight gradients of `groups` independent copies of conv `mod`: input (N, groups·C, H, W)
    and output gradient (N, groups·q, Ho, Wo) -> (groups·q, C, k, k), one grouped convolution
    backward (the backend's weight-gradient kernel; no im2col in memory)."""
    w = inp.new_zeros(1).expand(out.shape[1], *mod.weight.shape[1:])  # its shape only
    return torch.ops.aten.convolution_backward(
        out, inp, w, None, mod.stride, mod.padding, mod.dilation, False, [0, 0], groups,
        [False, True, False])[1]


# Output maps of at most this many positions: the clipped sum as the book-keeping product over
# im2col patches, whose (B·T, p) are small there; torch's grouped weight-gradient kernel runs at
# a fraction of its speed on such maps (LeNet's 2 x 2 maps, 16 rows of 32 samples, one thread:
# 3.2 ms against 2.0 ms; on 4 x 4 maps and larger it is the faster, 7.6 ms against 26 ms for
# the FedAvg CNN's second convolution).
SMALL_MAP = 4


def _conv2d(lay: Layer, a: Tensor, e: Tensor) -> Contribution:
    """Conv2d: per-sample norms the cheapest exact way (`conv_norm_way`); the clipped sum is the
    weight gradient of the clip-weighted output gradients, one grouped convolution backward
    over the m rows (groups = m), or over im2col patches on small maps (`SMALL_MAP`), or, where
    G_i is formed, its weighted sum."""
    mod = lay.module
    m, b = a.shape[:2]
    q, ho, wo = e.shape[2:]
    way = conv_norm_way(lay)
    a4 = a.reshape(m * b, *a.shape[2:])  # (m·B, C, H, W)
    e3 = e.reshape(m * b, q, ho * wo)  # (m·B, q, T)
    weight, bias = lay.param("weight"), lay.param("bias") if mod.bias is not None else None
    if way == "formed":  # every sample its own convolution group: G_i (m, B, q, C, k, k)
        g = _weight_grad(mod, a4.reshape(1, -1, *a4.shape[2:]), e.reshape(1, -1, ho, wo),
                         m * b).reshape(m, b, *mod.weight.shape)
        grads = {weight: g} | ({bias: e3.sum(dim=2).reshape(m, b, q)} if bias else {})
        return _formed(grads)
    small = ho * wo <= SMALL_MAP  # the clipped sum over im2col patches (`SMALL_MAP`)
    u = _unfolded(mod, a4) if way == "gram" or small else None  # (m·B, T, p), unfolded once
    if way == "gram" and u is not None:
        gram_a = u @ u.transpose(1, 2)
    else:
        gram_a = _patch_gram(mod, a4, (ho, wo))
    patches = u.reshape(m, b * ho * wo, -1) if small and u is not None else None  # (m, B·T, p)
    sq = (gram_a * (e3.transpose(1, 2) @ e3)).sum(dim=(1, 2)).reshape(m, b)  # ghost norm
    eb = e3.sum(dim=2).reshape(m, b, q) if bias else None  # (m, B, q) bias gradients
    if eb is not None:
        sq = sq + eb.pow(2).sum(dim=-1)

    def summed(c: Tensor) -> dict[str, Tensor]:
        ec = e * c[:, :, None, None, None]  # (m, B, q, Ho, Wo)
        if patches is not None:  # book-keeping over the im2col patches: (c E)^T U per row
            dw = ec.flatten(start_dim=3).transpose(2, 3).reshape(m, -1, q).transpose(1, 2) @ patches
        else:  # rows as convolution groups: input (B, m·C, H, W), output gradient (B, m·q, Ho, Wo)
            dw = _weight_grad(mod, a.transpose(0, 1).reshape(b, -1, *a.shape[3:]),
                              ec.transpose(0, 1).reshape(b, -1, ho, wo), m)
        sums = {weight: dw.reshape(m, *mod.weight.shape)}
        if bias and eb is not None:
            sums[bias] = _weighted(eb, c)
        return sums

    return sq, summed


def _formed(grads: dict[str, Tensor]) -> Contribution:
    """Per-sample gradients {name: (m, B, *shape)} already formed: norms and weighted sums."""
    sq = sum(g.flatten(start_dim=2).pow(2).sum(dim=-1) for g in grads.values())

    def summed(c: Tensor) -> dict[str, Tensor]:
        return {k: _weighted(g, c) for k, g in grads.items()}

    return sq, summed


def _group_norm(lay: Layer, a: Tensor, e: Tensor) -> Contribution:
    mod = lay.module
    m, b, ch = a.shape[:3]
    xhat = F.group_norm(a.reshape(m * b, ch, -1), mod.num_groups, eps=mod.eps)  # (m·B, C, S)
    e3 = e.reshape(m, b, ch, -1)  # (m, B, C, S)
    return _formed({lay.param("weight"): (e3 * xhat.reshape(e3.shape)).sum(dim=-1),
                    lay.param("bias"): e3.sum(dim=-1)})


def _generic(lay: Layer, a: Tensor, e: Tensor, pdict: dict[str, Tensor]) -> Contribution:
    """Any layer: per-sample gradients of its own parameters by vmap(vmap(vjp))."""
    local = {k: pdict[lay.param(k)] for k in _direct_params(lay.module)}  # {k: (m, *shape)}

    def one(p: dict[str, Tensor], ai: Tensor, ei: Tensor) -> dict[str, Tensor]:
        _, pull = vjp(lambda q: functional_call(lay.module, q, (ai[None],)), p)
        return pull(ei[None])[0]

    g = vmap(vmap(one, in_dims=(None, 0, 0)))(local, a, e)
    return _formed({lay.param(k): v for k, v in g.items()})


RULES: dict[str, Callable[[Layer, Tensor, Tensor], Contribution]] = {
    "linear": _linear, "conv2d": _conv2d, "group_norm": _group_norm,
}

_PLANS: weakref.WeakKeyDictionary[nn.Module, dict[Shape, FastClip | None]] = (
    weakref.WeakKeyDictionary())


def plan_for(module: nn.Module, sample_shape: Shape) -> FastClip | None:
    """The cached plan of `module` for per-sample inputs of `sample_shape`."""
    per = _PLANS.setdefault(module, {})
    if sample_shape not in per:
        per[sample_shape] = FastClip.build(module, sample_shape)
    return per[sample_shape]


def row_bytes(plan: FastClip, batch: int, itemsize: int) -> int:
    """Rough bytes one row needs (inputs, output gradients, and per conv layer what its norm
    way builds: patches and G_i, patches and Grams, or pixel and patch Grams)."""
    total = 0
    for lay in plan.layers:
        io = math.prod(lay.in_shape) + 2 * math.prod(lay.out_shape)
        if lay.rule == "conv2d":
            mod = lay.module
            t = math.prod(lay.out_shape[1:])
            p = mod.in_channels * math.prod(mod.kernel_size)
            s = math.prod(lay.in_shape[1:])
            io += {"formed": t * p + p * mod.out_channels, "gram": t * p + 2 * t * t,
                   "pixel": s * s + 2 * t * t}[conv_norm_way(lay)]
        total += io
    return 2 * total * batch * itemsize


def fast_clipped_sum(plan: FastClip, module: nn.Module, pdict: dict[str, Tensor], x: Tensor,
                     y: Tensor, mask: Tensor, bound: Tensor,
                     ) -> tuple[dict[str, Tensor], Tensor]:
    """Clipped sums {name: (m, *shape)} and norms (m, B) of `module` for rows pdict
    {name: (m, *shape)}, x (m, B, ...), y (m, B), mask (m, B) bool, bound a scalar or (m, B)."""
    a, e = plan.capture(module, pdict, x, y)
    parts = [RULES[lay.rule](lay, ak, ek) if lay.rule in RULES
             else _generic(lay, ak, ek, pdict)
             for lay, ak, ek in zip(plan.layers, a, e, strict=True)]
    norms = sum(sq for sq, _ in parts).clamp(min=0).sqrt()  # (m, B)
    c = (bound / (norms + 1e-12)).clamp(max=1.0) * mask.to(norms.dtype)  # (m, B)
    sums: dict[str, Tensor] = {}
    for _, summed in parts:
        sums.update(summed(c))
    return sums, norms
