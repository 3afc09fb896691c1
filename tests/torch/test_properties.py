"""Property tests: any tensors given to an autosched op give either the right answer or a
clear error (ValueError for shapes and devices, TypeError for dtypes), never a crash or a
silently wrong result. Each case predicts which of the three must happen."""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import autosched.torch as at

# workload -> (torch reference, float32 input shapes of its kernels in the test library)
CASES = {
    "matmul": (lambda a, b: a @ b, [[(8, 6), (6, 5)]]),
    "linear": (lambda x, w, b: x @ w.t() + b,
               [[(8, 4), (6, 4), (6,)], [(8, 6), (3, 6), (3,)], [(16, 8), (12, 8), (12,)],
                [(16, 12), (4, 12), (4,)]]),
    "gelu": (lambda x: torch.nn.functional.gelu(x, approximate="tanh"), [[(8, 16)], [(16, 12)]]),
    "softmax": (lambda x: torch.softmax(x, -1), [[(8, 16)], [(16, 12)]]),
}
DTYPES = [torch.float32, torch.float64, torch.float16, torch.int32]
LAYOUTS = ["contiguous", "transposed", "strided", "expanded", "misaligned"]


def _make(shape, dtype, layout, device, seed):
    """A tensor of `shape` holding random values, stored in the given layout."""
    g = torch.Generator().manual_seed(seed)
    values = (torch.randn(shape, generator=g) * 3).to(dtype)
    if layout == "transposed" and len(shape) == 2:
        t = values.t().contiguous().t()
    elif layout == "strided" and len(shape) >= 1:
        wide = torch.zeros(*shape[:-1], shape[-1] * 2, dtype=dtype)
        wide[..., ::2] = values
        t = wide[..., ::2]
    elif layout == "expanded" and len(shape) >= 1:
        values = values[..., :1].clone()
        t = values.expand(shape)
    elif layout == "misaligned":
        buf = torch.zeros(values.numel() + 1, dtype=dtype)
        t = buf[1:].view(shape)
        t.copy_(values)
    else:
        t = values
    return t.to(device) if device != "cpu" else t


@st.composite
def calls(draw):
    workload = draw(st.sampled_from(sorted(CASES)))
    _, variants = CASES[workload]
    shapes = [list(s) for s in draw(st.sampled_from(variants))]
    if draw(st.integers(0, 3)) == 0:  # perturb one dimension of one input
        i = draw(st.integers(0, len(shapes) - 1))
        d = draw(st.integers(0, len(shapes[i]) - 1))
        shapes[i][d] = max(1, shapes[i][d] + draw(st.sampled_from([-1, 1, 3])))
    dtype = torch.float32 if draw(st.integers(0, 2)) else draw(st.sampled_from(DTYPES))
    dtypes = [dtype if draw(st.integers(0, 7)) else draw(st.sampled_from(DTYPES))
              for _ in shapes]
    placement = draw(st.sampled_from(["cpu"] * 5 + ["meta", "mixed"]))
    devices = [placement if placement != "mixed" else draw(st.sampled_from(["cpu", "meta"]))
               for _ in shapes]
    layouts = [draw(st.sampled_from(LAYOUTS)) for _ in shapes]
    return workload, [tuple(s) for s in shapes], dtypes, devices, layouts


def _expected(workload, shapes, dtypes, devices):
    _, variants = CASES[workload]
    known_shapes = [tuple(map(tuple, v)) for v in variants]
    if len(set(devices)) > 1:
        return "device"
    shape_ok = tuple(shapes) in known_shapes
    dtype_ok = all(d == torch.float32 for d in dtypes)
    if shape_ok and dtype_ok:
        return "meta" if devices[0] == "meta" else "value"
    return "dtype" if shape_ok else "shape"


@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=calls())
def test_any_input_gives_the_right_answer_or_a_clear_error(nn_ops, case):
    workload, shapes, dtypes, devices, layouts = case
    reference, _ = CASES[workload]
    tensors = [_make(s, dt, lay, dev, seed=i)
               for i, (s, dt, dev, lay) in enumerate(zip(shapes, dtypes, devices, layouts))]
    op = getattr(torch.ops.autosched, workload)
    expected = _expected(workload, shapes, dtypes, devices)
    event(f"expect {expected}")
    if expected == "value":
        event(f"value with {'/'.join(sorted(set(layouts)))} inputs")
    if expected == "device" or expected == "shape":
        with pytest.raises(at.KernelArgumentError) as err:
            op(*tensors)
        assert isinstance(err.value, ValueError)
        assert f"autosched.{workload}" in str(err.value)
    elif expected == "dtype":
        with pytest.raises(at.KernelDtypeError) as err:
            op(*tensors)
        assert isinstance(err.value, TypeError)
    elif expected == "meta":
        out = op(*tensors)
        want = reference(*[torch.empty(s, device="meta") for s in shapes])
        assert out.device.type == "meta" and out.shape == want.shape and out.dtype == want.dtype
    else:
        before = [t.clone() for t in tensors]
        out = op(*tensors)
        torch.testing.assert_close(out, reference(*tensors), rtol=1e-5, atol=1e-4)
        for a, b in zip(tensors, before):  # inputs are never written
            assert torch.equal(a, b)
