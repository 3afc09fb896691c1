"""On a GPU: the shape buckets with torch's real capture, and the backend's cudagraphs=True
recording torch's CUDA graph trees with outputs and gradients equal to eager's (the
library holds decisions only, so the graphs are torch's own around the rewrite; the
kernels' own capture runs in the device script, which has a CUDA library)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _causal(x):
    return x.cumsum(dim=1) * 2.0


def test_buckets_capture_once_per_bucket_and_replay_the_calls_data():
    import autosched.model

    step = autosched.model.bucketed(_causal, sizes=[16, 64], dim=1)
    torch.manual_seed(0)
    for size in (5, 16, 40, 3, 64, 33):
        x = torch.randn(4, size, device="cuda")
        torch.testing.assert_close(step(x), _causal(x), rtol=1e-5, atol=1e-5)
    assert step.captures == [16, 64]
    assert dict(step.calls) == {16: 3, 64: 3}


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(32, 64), nn.Linear(64, 8)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


@pytest.mark.parametrize("compiler", ["eager", "inductor"])
def test_the_backend_records_cudagraph_trees_and_matches_eager(tmp_path, compiler):
    import autosched.model
    from autosched.model.choice import write_choices
    from torch._dynamo.utils import counters
    from torch._inductor import cudagraph_trees

    write_choices(str(tmp_path), "mlp.py", True, [])
    torch.manual_seed(0)
    model, x = MLP().cuda(), torch.randn(16, 32, device="cuda")
    reference = MLP().cuda()
    reference.load_state_dict(model.state_dict())
    torch._dynamo.reset()
    skips = counters["inductor"]["cudagraph_skips"]
    compiled = torch.compile(model, backend=autosched.model.backend(
        tmp_path, compiler, cudagraphs=True), dynamic=False)
    for _ in range(3):     # warm-up, record, replay
        torch.compiler.cudagraph_mark_step_begin()
        out = compiled(x)
        out.square().mean().backward()
    for _ in range(3):     # the same three steps, gradients accumulating alike
        expected = reference(x)
        expected.square().mean().backward()
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-5, msg=name)
    assert counters["inductor"]["cudagraph_skips"] == skips
    manager = cudagraph_trees.get_manager(x.device.index, create_if_none_exists=False)
    assert manager is not None and sum(len(nodes) for nodes in manager.roots.values()) >= 1
