"""sixfold ops as torch.library custom ops, so torch.compile(fullgraph=True) graphs call them.

Each op has a fake (meta) implementation giving the output's shape, dtype and device without
running anything; the real implementation runs on torch's current CUDA stream (or the CPU).

    import sixfold.torch  # registers torch.ops.sixfold.*
    y = torch.ops.sixfold.inclusive_scan(x, "sum")
"""
from __future__ import annotations

import torch

from . import _C
from . import _torch_stream


def _stream(x: torch.Tensor) -> int:
    return _torch_stream(x) if x.is_cuda else 0


@torch.library.custom_op("sixfold::inclusive_scan", mutates_args=())
def inclusive_scan(x: torch.Tensor, op: str = "sum") -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _C.inclusive_scan(x, out, op, _stream(x))
    return out


@inclusive_scan.register_fake
def _(x, op="sum"):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("sixfold::exclusive_scan", mutates_args=())
def exclusive_scan(x: torch.Tensor, op: str = "sum") -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _C.exclusive_scan(x, out, op, _stream(x))
    return out


@exclusive_scan.register_fake
def _(x, op="sum"):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("sixfold::reduce", mutates_args=())
def reduce(x: torch.Tensor, op: str = "sum") -> torch.Tensor:
    out = x.new_empty(())
    _C.reduce(x, out, op, _stream(x))
    return out


@reduce.register_fake
def _(x, op="sum"):
    return x.new_empty(())


@torch.library.custom_op("sixfold::segmented_reduce", mutates_args=())
def segmented_reduce(x: torch.Tensor, offsets: torch.Tensor, op: str = "sum") -> torch.Tensor:
    out = x.new_empty((max(offsets.shape[0] - 1, 0),))
    _C.segmented_reduce(x, offsets, out, op, _stream(x))
    return out


@segmented_reduce.register_fake
def _(x, offsets, op="sum"):
    return x.new_empty((max(offsets.shape[0] - 1, 0),))


@torch.library.custom_op("sixfold::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _C.rms_norm(x, weight, out, eps, _stream(x))
    return out


@rms_norm.register_fake
def _(x, weight=None, eps=1e-6):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("sixfold::layer_norm", mutates_args=())
def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _C.layer_norm(x, weight, bias, out, eps, _stream(x))
    return out


@layer_norm.register_fake
def _(x, weight=None, bias=None, eps=1e-5):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("sixfold::softmax", mutates_args=())
def softmax(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _C.softmax(x, out, _stream(x))
    return out


@softmax.register_fake
def _(x):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("sixfold::bias_gelu", mutates_args=())
def bias_gelu(x: torch.Tensor, bias: torch.Tensor | None = None, approximate: str = "none") -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _C.bias_gelu(x, bias, out, approximate, _stream(x))
    return out


@bias_gelu.register_fake
def _(x, bias=None, approximate="none"):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("sixfold::silu_gate", mutates_args=())
def silu_gate(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(a, memory_format=torch.contiguous_format)
    _C.silu_gate(a, b, out, _stream(a))
    return out


@silu_gate.register_fake
def _(a, b):
    return torch.empty_like(a, memory_format=torch.contiguous_format)
