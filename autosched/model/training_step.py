"""One training step of a model: forward, loss, backward.

A step here is forward + backward; the optimizer update is the same under every plan and
is left out. The loss is `loss_fn(model(*inputs))`, or without a `loss_fn` the output
itself when it is a scalar, else the sum of the output (its gradient is all ones). Its
measurement (time and saved bytes) is the runtime's: runtime/measured_step.py.
"""
from __future__ import annotations

import torch


def compute_loss(model, inputs, loss_fn=None) -> torch.Tensor:
    out = model(*inputs)
    if loss_fn is not None:
        out = loss_fn(out)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"the loss must be a tensor, got {type(out).__name__}; "
                        "give a loss_fn that reduces the model output to one")
    return out if out.dim() == 0 else out.sum()


def training_step(model, inputs, loss_fn=None) -> torch.Tensor:
    """Forward, loss, backward; gradients accumulate into the parameters' .grad."""
    loss = compute_loss(model, inputs, loss_fn)
    loss.backward()
    return loss.detach()


def zero_grads(model) -> None:
    for p in model.parameters():
        p.grad = None


def parameter_grads(run, inputs, loss_fn=None, params_of=None) -> dict:
    """The gradients one training step of `run` gives the parameters of `params_of`
    (default `run`; a planned or compiled model shares its original's parameters), by
    name, cloned; the parameters' .grad is left cleared."""
    params_of = params_of or run
    zero_grads(params_of)
    training_step(run, inputs, loss_fn)
    out = {n: p.grad.clone() for n, p in params_of.named_parameters()}
    zero_grads(params_of)
    return out
