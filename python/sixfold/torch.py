"""sixfold ops as torch.library custom ops, so torch.compile(fullgraph=True) graphs call them.

Each op has a fake (meta) implementation giving the output's shape, dtype and device without
running anything; the real implementation runs on torch's current CUDA stream (or the CPU).

The norms are differentiable: rms_norm, layer_norm, softmax, log_softmax, add_rms_norm and
add_layer_norm have autograd formulas that call sixfold's fused backward kernels (themselves
custom ops: rms_norm_backward, layer_norm_backward, softmax_backward, log_softmax_backward), so
training loops and torch.compile'd backward graphs run them. The backward recomputes each row's
statistics in the same pass over x (nothing extra is saved by the forward); dweight / dbias are
summed over rows in a fixed order. bias_gelu, silu_gate and the scans are forward-only: autograd
through them raises torch's "no autograd kernel" error.

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


# ---- Autograd for the norms --------------------------------------------------------------------
# Backward kernels as custom ops (a tensor result each; an empty tensor where a gradient is not
# asked for, as custom ops cannot return None).

def _none_grad(like: torch.Tensor) -> torch.Tensor:
    return like.new_empty((0,))


@torch.library.custom_op("sixfold::rms_norm_backward", mutates_args=())
def rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None = None,
                      eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    dweight = torch.empty_like(weight, memory_format=torch.contiguous_format) if weight is not None else None
    _C.rms_norm_backward(dy, x, weight, dx, dweight, eps, _stream(x))
    return dx, dweight if dweight is not None else _none_grad(x)


@rms_norm_backward.register_fake
def _(dy, x, weight=None, eps=1e-6):
    dweight = torch.empty_like(weight, memory_format=torch.contiguous_format) if weight is not None else None
    return torch.empty_like(x, memory_format=torch.contiguous_format), (
        dweight if dweight is not None else _none_grad(x))


@torch.library.custom_op("sixfold::layer_norm_backward", mutates_args=())
def layer_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None = None,
                        bias: bool = True, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    dweight = torch.empty_like(weight, memory_format=torch.contiguous_format) if weight is not None else None
    dbias = (weight if weight is not None else x).new_empty((x.shape[-1],)) if bias else None
    _C.layer_norm_backward(dy, x, weight, dx, dweight, dbias, eps, _stream(x))
    return (dx, dweight if dweight is not None else _none_grad(x),
            dbias if dbias is not None else _none_grad(x))


@layer_norm_backward.register_fake
def _(dy, x, weight=None, bias=True, eps=1e-5):
    dweight = torch.empty_like(weight, memory_format=torch.contiguous_format) if weight is not None else None
    dbias = (weight if weight is not None else x).new_empty((x.shape[-1],)) if bias else None
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            dweight if dweight is not None else _none_grad(x), dbias if dbias is not None else _none_grad(x))


@torch.library.custom_op("sixfold::softmax_backward", mutates_args=())
def softmax_backward(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    dx = torch.empty_like(y, memory_format=torch.contiguous_format)
    _C.softmax_backward(dy, y, dx, _stream(y))
    return dx


@softmax_backward.register_fake
def _(dy, y):
    return torch.empty_like(y, memory_format=torch.contiguous_format)


@torch.library.custom_op("sixfold::log_softmax", mutates_args=())
def log_softmax(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _C.log_softmax(x, out, _stream(x))
    return out


@log_softmax.register_fake
def _(x):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("sixfold::log_softmax_backward", mutates_args=())
def log_softmax_backward(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    dx = torch.empty_like(y, memory_format=torch.contiguous_format)
    _C.log_softmax_backward(dy, y, dx, _stream(y))
    return dx


@log_softmax_backward.register_fake
def _(dy, y):
    return torch.empty_like(y, memory_format=torch.contiguous_format)


@torch.library.custom_op("sixfold::add_rms_norm", mutates_args=())
def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None = None,
                 eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, s): s = x + residual (rounded to x's dtype), y = rms_norm(s, weight), one pass."""
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    sum_out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _C.add_rms_norm(x, residual, weight, out, sum_out, eps, _stream(x))
    return out, sum_out


@add_rms_norm.register_fake
def _(x, residual, weight=None, eps=1e-6):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(x, memory_format=torch.contiguous_format))


@torch.library.custom_op("sixfold::add_layer_norm", mutates_args=())
def add_layer_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None = None,
                   bias: torch.Tensor | None = None, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, s): s = x + residual (rounded to x's dtype), y = layer_norm(s, weight, bias), one pass."""
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    sum_out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _C.add_layer_norm(x, residual, weight, bias, out, sum_out, eps, _stream(x))
    return out, sum_out


@add_layer_norm.register_fake
def _(x, residual, weight=None, bias=None, eps=1e-5):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(x, memory_format=torch.contiguous_format))


def _grad_or_none(ctx, i: int, g: torch.Tensor):
    """The gradient of input i where autograd asks for it (and the op had that input), else None."""
    needs = ctx.needs_input_grad  # may be shorter than the op's inputs where trailing ones are None
    return g if i < len(needs) and needs[i] and g.numel() else None


def _rms_setup(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _rms_grad(ctx, dy):
    x, weight = ctx.saved_tensors
    dx, dweight = torch.ops.sixfold.rms_norm_backward(dy.contiguous(), x, weight, ctx.eps)
    return dx, _grad_or_none(ctx, 1, dweight), None


rms_norm.register_autograd(_rms_grad, setup_context=_rms_setup)


def _layer_setup(ctx, inputs, output):
    x, weight, bias, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps, ctx.has_bias = eps, bias is not None


def _layer_grad(ctx, dy):
    x, weight = ctx.saved_tensors
    dx, dweight, dbias = torch.ops.sixfold.layer_norm_backward(dy.contiguous(), x, weight, ctx.has_bias, ctx.eps)
    return dx, _grad_or_none(ctx, 1, dweight), _grad_or_none(ctx, 2, dbias), None


layer_norm.register_autograd(_layer_grad, setup_context=_layer_setup)


def _save_output(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_grad(ctx, dy):
    (y,) = ctx.saved_tensors
    return torch.ops.sixfold.softmax_backward(dy.contiguous(), y)


def _log_softmax_grad(ctx, dy):
    (y,) = ctx.saved_tensors
    return torch.ops.sixfold.log_softmax_backward(dy.contiguous(), y)


softmax.register_autograd(_softmax_grad, setup_context=_save_output)
log_softmax.register_autograd(_log_softmax_grad, setup_context=_save_output)


# The fused add: y = norm(s), s = x + residual, both returned. The gradient reaching s is the
# norm's backward of dy plus whatever flows into the returned s; x and residual both get it.

def _add_setup(ctx, inputs, output):
    weight = inputs[2]
    ctx.save_for_backward(output[1], weight)
    ctx.eps = inputs[-1]
    ctx.has_bias = len(inputs) == 5 and inputs[3] is not None


def _sum_grad(ds_norm, ds):
    return ds_norm if ds is None else ds_norm + ds


def _add_rms_grad(ctx, dy, ds):
    s, weight = ctx.saved_tensors
    ds_norm, dweight = torch.ops.sixfold.rms_norm_backward(dy.contiguous(), s, weight, ctx.eps)
    g = _sum_grad(ds_norm, ds)
    return g, g, _grad_or_none(ctx, 2, dweight), None


def _add_layer_grad(ctx, dy, ds):
    s, weight = ctx.saved_tensors
    ds_norm, dweight, dbias = torch.ops.sixfold.layer_norm_backward(dy.contiguous(), s, weight, ctx.has_bias,
                                                                    ctx.eps)
    g = _sum_grad(ds_norm, ds)
    return g, g, _grad_or_none(ctx, 2, dweight), _grad_or_none(ctx, 3, dbias), None


add_rms_norm.register_autograd(_add_rms_grad, setup_context=_add_setup)
add_layer_norm.register_autograd(_add_layer_grad, setup_context=_add_setup)
