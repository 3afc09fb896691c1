"""Offload: separate host copies, one per storage, prefetched one layer ahead, exact grads."""
from __future__ import annotations

import pytest
import torch

from autosched.runtime.apply_plan import apply_actions
from autosched.runtime.offload import LayerOffload


def test_host_copy_is_a_separate_tensor_and_views_share_it():
    torch.manual_seed(0)
    x = torch.randn(64, 64, requires_grad=True)
    off = LayerOffload(excluded_keys=set())
    with off.hooks():
        y = x.exp()                                   # saves its output
        z = y[:32].sin().sum() + y[32:].cos().sum()   # save two views of it
    off.end_forward(release=True)
    assert len(off.entries) == 1
    entry = off.entries[0]
    assert entry.original is None                     # the device original was let go
    assert entry.host.untyped_storage().data_ptr() != y.untyped_storage().data_ptr()
    assert torch.equal(entry.host.view(torch.float32).view(64, 64), y.detach())
    off.prefetch()
    assert entry.device.untyped_storage().data_ptr() != entry.host.untyped_storage().data_ptr()
    z.backward()
    expected = torch.exp(x.detach()) * torch.cat([torch.cos(y[:32].detach()),
                                                  -torch.sin(y[32:].detach())])
    torch.testing.assert_close(x.grad, expected)
    assert entry.device is None and entry.host is None       # unpacked: both copies released
    assert off.pool.bytes_held == 64 * 64 * 4                 # the host buffer, for reuse


def test_host_buffers_are_reused_and_a_second_backward_is_refused():
    from autosched.runtime.offload import HostPool

    pool, ptrs = HostPool(), []
    x = torch.randn(64, 64, requires_grad=True)
    for _ in range(2):
        off = LayerOffload(set(), pool=pool)
        with off.hooks():
            z = x.exp().sin().sum()
        off.end_forward(release=True)
        ptrs.append(off.entries[0].host.data_ptr())
        z.backward(retain_graph=True)
    assert ptrs[0] == ptrs[1]
    with pytest.raises(RuntimeError, match="one backward per forward"):
        z.backward()


def test_offloaded_gpt_has_exact_gradients(tiny_gpt, grads):
    model, inputs, loss_fn = tiny_gpt
    ref = grads(model, model, inputs, loss_fn)
    for acts in (["offload", "offload"], ["offload", "keep"], ["keep", "offload+memeff_ln"]):
        got = grads(model, apply_actions(model, acts, "blocks"), inputs, loss_fn)
        tol = dict(rtol=1e-4, atol=1e-5) if "offload+memeff_ln" in acts else {}
        for n in ref:
            torch.testing.assert_close(got[n], ref[n], **tol, msg=f"{acts} {n}")


def test_prefetch_runs_one_layer_ahead_of_backward(gpt):
    events, made = [], []

    class Recording(LayerOffload):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.label = len(made)
            made.append(self)

        def prefetch(self):
            events.append(("prefetch", self.label))
            super().prefetch()

        def unpack(self, packed):
            if not events or events[-1] != ("unpack", self.label):
                events.append(("unpack", self.label))
            return super().unpack(packed)

    model = gpt.make_model(n_layer=3, d_model=32, n_head=2, seq_len=8, vocab=16)
    inputs = gpt.make_inputs(batch=2, seq_len=8, vocab=16)
    planned = apply_actions(model, ["offload"] * 3, "blocks", offload_factory=Recording)
    planned(*inputs).backward()
    assert len(made) == 3
    assert events == [("prefetch", 2), ("prefetch", 1), ("unpack", 2),
                      ("prefetch", 0), ("unpack", 1), ("unpack", 0)]


def test_offload_copies_exactly_what_keep_saves_but_no_parameters(tiny_gpt):
    from autosched.runtime.meter import SavedTensorMeter, model_state, storage_key

    model, inputs, _ = tiny_gpt
    block = model.blocks[0]
    x = torch.randn(2, 16, 32, requires_grad=True)
    with SavedTensorMeter(model_state(block)) as keep:
        block(x)
    params = {storage_key(p) for p in model_state(block)}
    off = LayerOffload(params)
    with off.hooks():
        out = block(x)
    assert off.entries and all(e.original is not None for e in off.entries)
    originals = {storage_key(e.original) for e in off.entries}
    assert not originals & params
    small = sum(s.nbytes for s in keep.storages.values() if s.nbytes < 1024)
    assert sum(e.host.numel() for e in off.entries) == keep.device_bytes - small
    out.sum().backward()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("side_streams", [False, True])
def test_cuda_offload_comes_back_to_the_gpu_with_or_without_side_streams(side_streams):
    """A layer profiled on its own has no schedule: its copies run on the current stream
    (or streams of its own) and backward gets device tensors back (the H200 profile died
    here before: no stream was passed)."""
    from autosched.runtime.offload import SideStreams

    torch.manual_seed(0)
    x = torch.randn(256, 256, device="cuda", requires_grad=True)
    streams = SideStreams().get(x.device) if side_streams else None
    off = LayerOffload(set(), streams=streams)
    with off.hooks():
        z = x.exp().sin().sum()
    off.end_forward(release=True)
    assert off.entries and all(e.host.device.type == "cpu" and e.host.is_pinned()
                               for e in off.entries)
    off.prefetch()
    assert all(e.device.device == x.device for e in off.entries)
    z.backward()
    torch.testing.assert_close(x.grad, torch.exp(x.detach()) * torch.cos(torch.exp(x.detach())))
