"""The peer of the kernels of several outputs of one aten call: torch's one call with
those outputs in its mask computes exactly what each output's own twin computes, the
groups are the sets of siblings that one call makes, and a joint choice is made for the
whole call."""
from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from autosched.model.joint_calls import joint_call, joint_operator, sibling_groups  # noqa: E402
from autosched.model.workloads import WORKLOADS  # noqa: E402

CONV = {"N": 2, "C": 3, "H": 9, "W": 7, "K": 5, "R": 3, "S": 3, "stride": 2, "pad": 1,
        "dtype": "float32"}


def _conv_members(nhwc: bool, parts=(0, 1, 2)):
    g = torch.Generator().manual_seed(0)
    P, Q = 5, 4   # (9 + 2 - 3) // 2 + 1, (7 + 2 - 3) // 2 + 1
    n, c, h, w, k = CONV["N"], CONV["C"], CONV["H"], CONV["W"], CONV["K"]
    dy = torch.randn((n, P, Q, k) if nhwc else (n, k, P, Q), generator=g)
    x = torch.randn((n, h, w, c) if nhwc else (n, c, h, w), generator=g)
    wt = torch.randn((k, 3, 3, c) if nhwc else (k, c, 3, 3), generator=g)
    base = "aten_conv2d_nhwc" if nhwc else "aten_conv2d"
    every = [(base + "_grad_input", CONV, [dy, wt]), (base + "_grad_weight", CONV, [dy, x]),
             (base + "_grad_bias", {"N": n, "K": k, "P": P, "Q": Q, "dtype": "float32"},
              [dy])]
    return [every[i] for i in parts]


def _in_memory_order(t, nhwc):
    return t.permute(0, 2, 3, 1) if nhwc and t.dim() == 4 else t


@pytest.mark.parametrize("nhwc", [False, True])
@pytest.mark.parametrize("parts", [(0, 1, 2), (0, 1), (1, 2), (0, 2)])
def test_one_convolution_backward_call_computes_each_twins_output(nhwc, parts):
    members = _conv_members(nhwc, parts)
    out = joint_call(members)()   # (what torch returns for an output not asked for varies)
    for i, (workload, params, tensors) in zip(parts, members):
        twin = WORKLOADS[workload].torch_call(tensors, params)
        torch.testing.assert_close(_in_memory_order(out[i], nhwc), twin, rtol=1e-5,
                                   atol=1e-5)


def test_one_layer_norm_backward_call_computes_each_twins_output():
    g = torch.Generator().manual_seed(1)
    M, N = 6, 10
    dy, x = torch.randn(M, N, generator=g), torch.randn(M, N, generator=g)
    mean, rstd = torch.randn(M, generator=g), torch.rand(M, generator=g) + 0.5
    gamma = torch.randn(N, generator=g)
    p = {"M": M, "N": N, "dtype": "float32"}
    members = [("aten_layer_norm_grad_input", p, [dy, x, mean, rstd, gamma]),
               ("aten_layer_norm_grad_gamma", p, [dy, x, mean, rstd]),
               ("aten_layer_norm_grad_beta", p, [dy])]
    for chosen in ((0, 1, 2), (1, 2), (0, 2)):
        out = joint_call([members[i] for i in chosen])()
        assert [o is not None for o in out] == [i in chosen for i in range(3)]
        for i in chosen:
            workload, params, tensors = members[i]
            torch.testing.assert_close(out[i], WORKLOADS[workload].torch_call(tensors, params))


@pytest.mark.parametrize("workloads", [
    ["aten_conv2d_grad_input"],                                    # one output alone
    ["aten_conv2d_grad_input", "aten_conv2d_nhwc_grad_weight"],    # two operators
    ["aten_conv2d_grad_bias", "aten_conv2d_grad_bias"],            # an output twice
    ["aten_layer_norm_grad_input", "aten_mm"],
])
def test_sets_that_are_not_one_call_have_no_joint_peer(workloads):
    assert joint_operator(workloads) is None
    with pytest.raises(ValueError, match="not the outputs of one operator call"):
        joint_call([(w, CONV, []) for w in workloads])


def test_groups_are_the_siblings_of_one_call_and_a_shared_bias_gradient_splits_none():
    """Two biased convolutions with the same output shape share their bias gradient's
    task: their siblings join both calls' outputs, two input gradients, which no one call
    computes, so that set has no group; a layer norm's three gradients are one."""
    from autosched.model.extract import ModelOp, ModelOps

    def op(workload, n, siblings=()):
        return ModelOp(workload, {"n": n}, 1, siblings=set(siblings))

    def key(workload, n):
        return (workload, (("n", n),))

    gi1, gw1 = key("aten_conv2d_grad_input", 1), key("aten_conv2d_grad_weight", 1)
    gi2, gw2 = key("aten_conv2d_grad_input", 2), key("aten_conv2d_grad_weight", 2)
    gb = key("aten_conv2d_grad_bias", 0)
    li, lg, lb = (key(f"aten_layer_norm_grad_{p}", 0) for p in ("input", "gamma", "beta"))
    ops = [op("aten_mm", 0),
           op("aten_layer_norm_grad_input", 0, [lg, lb]),
           op("aten_conv2d_grad_input", 1, [gw1, gb]), op("aten_conv2d_grad_weight", 1, [gi1, gb]),
           op("aten_conv2d_grad_bias", 0, [gi1, gw1, gi2, gw2]),
           op("aten_conv2d_grad_input", 2, [gw2, gb]), op("aten_conv2d_grad_weight", 2, [gi2, gb]),
           op("aten_layer_norm_grad_gamma", 0, [li, lb]),
           op("aten_layer_norm_grad_beta", 0, [li, lg]),
           op("aten_conv2d_grad_input", 3, [key("aten_conv2d_grad_weight", 3)]),
           op("aten_conv2d_grad_weight", 3, [key("aten_conv2d_grad_input", 3)])]
    assert sibling_groups(ModelOps("m.py", True, ops, None, None)) == [(1, 7, 8), (9, 10)]


def test_a_joint_choice_is_made_for_the_whole_call():
    """The kernels of a call's outputs against torch's one call: chosen where their calls
    sum to less, whatever torch's single-output baseline says; model_ops.json keeps it."""
    from autosched.model.choice import OpChoice

    def choice(joint_call_s, joint_torch_call_s):
        return OpChoice("aten_conv2d_grad_input", dict(CONV), 2, {"aten.x": 2}, "k",
                        torch_s=3e-4, kernel_s=1e-4, baseline_record_id=1,
                        kernel_record_id=2, call_s=1.2e-4, torch_call_s=None,
                        joint_call_s=joint_call_s, joint_torch_call_s=joint_torch_call_s)

    slower = choice(5e-4, 4e-4)   # each kernel beats torch's one-output call, not the pair
    assert slower.chosen == "torch" and slower.decided_by.startswith("side by side, with")
    assert "torch's one call of all outputs faster (kernels at 0.80x, side by side)" \
        in slower.reason
    faster = choice(3e-4, 4e-4)
    assert faster.chosen == "autosched" and "(1.33x torch's one call" in faster.reason
    # before export: the sum of the kernels' records against the call's baseline record
    # (whatever each kernel's own record and torch's single-output baseline say)
    recorded = replace(faster, call_s=None, joint_call_s=None, joint_torch_call_s=None,
                       joint_kernel_s=5e-4, joint_torch_s=4e-4)
    assert recorded.chosen == "torch" and recorded.kernel_s < recorded.torch_s
    assert recorded.decided_by == "records, with the other outputs of its call"
    assert recorded.reason.endswith("(kernels at 0.80x, records)")
    # `--decide-on records` at export: the kernels' calls against the call's record
    called = replace(recorded, call_s=1e-4, joint_call_s=2e-4)
    assert called.chosen == "autosched"
    assert called.decided_by == "call against baseline record, with the other outputs of its call"
    assert called.reason.endswith("(2.00x torch's one call, call against baseline record)")
    # timed beside torch's one call at export: that pair decides, not the records
    assert replace(slower, joint_kernel_s=1e-4, joint_torch_s=1.0).chosen == "torch"
    for c in (slower, faster, recorded, called):
        assert OpChoice.from_json(c.to_json()) == c
