"""`autosched.model.bucketed`: pad to the bucket, one graph per bucket in one shared pool,
the bucket chosen per call, the padded rows cut out; run on the CPU through a fake
capture that records what was captured and replays by calling fn on the static buffers."""
from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")


class FakeCapture:
    """Records each capture (bucket, pool) and each replay; a replay runs the captured
    function again and writes its results into the captured outputs, as a graph does."""

    def __init__(self):
        self.pools, self.captured, self.replays = [], [], Counter()
        self.static_inputs = {}

    def new_pool(self):
        handle = ("pool", len(self.pools))
        self.pools.append(handle)
        return handle

    def capture(self, run, pool, bucket):
        self.captured.append((bucket, pool))
        outputs = run()
        flat = outputs if isinstance(outputs, (tuple, list)) else (outputs,)

        def replay():
            self.replays[bucket] += 1
            again = run()
            for static, new in zip(flat, again if isinstance(again, (tuple, list))
                                   else (again,)):
                static.copy_(new)

        return replay, outputs


def _make(fn, sizes=(4, 8, 16), dim=1, **options):
    import autosched.model

    fake = FakeCapture()
    return autosched.model.bucketed(fn, sizes=list(sizes), dim=dim, capture=fake,
                                    **options), fake


def _causal_cumsum(x):
    return x.cumsum(dim=1) * 2.0


@pytest.mark.parametrize("size, bucket", [(1, 4), (3, 4), (4, 4), (5, 8), (8, 8), (9, 16),
                                          (16, 16)])
def test_each_size_goes_to_the_smallest_bucket_at_least_as_large(size, bucket):
    step, fake = _make(_causal_cumsum)
    assert step.bucket_for(size) == bucket
    step(torch.ones(2, size))
    assert [b for b, _ in fake.captured] == [bucket]
    assert step.calls == Counter({bucket: 1})


def test_unsorted_duplicate_sizes_are_one_sorted_set():
    step, _ = _make(_causal_cumsum, sizes=(16, 4, 8, 4))
    assert step.sizes == (4, 8, 16)
    assert step.bucket_for(17) is None


def test_inputs_are_padded_with_pad_value_to_the_bucket():
    seen = []

    def record(x, ids):
        seen.append((x.clone(), ids.clone()))
        return x * 1.0

    step, _ = _make(record, sizes=(4, 8), dim=1, pad_value=-1)
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    ids = torch.tensor([[7, 8, 9], [1, 2, 3]])
    step(x, ids)
    padded_x, padded_ids = seen[-1]
    assert padded_x.tolist() == [[0.0, 1.0, 2.0, -1.0], [3.0, 4.0, 5.0, -1.0]]
    assert padded_ids.tolist() == [[7, 8, 9, -1], [1, 2, 3, -1]]


def test_a_shorter_call_refills_the_padding_a_longer_one_left():
    seen = []

    def record(x):
        seen.append(x.clone())
        return x * 1.0

    step, _ = _make(record, sizes=(4,), dim=0)
    step(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    step(torch.tensor([5.0, 6.0]))
    assert seen[-1].tolist() == [5.0, 6.0, 0.0, 0.0]


def test_rowwise_and_causal_outputs_equal_the_unpadded_call_exactly():
    step, _ = _make(_causal_cumsum, sizes=(4, 8, 16), dim=1)
    torch.manual_seed(0)
    for size in (3, 4, 5, 11, 16, 2):
        x = torch.randn(3, size)
        out = step(x)
        assert out.shape == (3, size)
        torch.testing.assert_close(out, _causal_cumsum(x), rtol=0, atol=0)


def _masked_mean(x, valid_mask):
    """Non-causal: every row sees the mean over the valid rows only."""
    m = valid_mask.to(x.dtype)[None, :, None]
    mean = (x * m).sum(dim=1, keepdim=True) / m.sum()
    return x - mean


def _length_mean(x, valid_length):
    keep = (torch.arange(x.shape[1]) < valid_length).to(x.dtype)[None, :, None]
    mean = (x * keep).sum(dim=1, keepdim=True) / valid_length
    return x - mean


@pytest.mark.parametrize("valid, fn", [("mask", _masked_mean), ("length", _length_mean)])
def test_fn_told_the_valid_rows_equals_the_unpadded_call(valid, fn):
    step, fake = _make(fn, sizes=(8,), dim=1, valid=valid, pad_value=100.0)
    torch.manual_seed(1)
    for size in (5, 8, 3):
        x = torch.randn(2, size, 4)
        kwargs = {"valid_mask": torch.ones(size, dtype=torch.bool)} if valid == "mask" \
            else {"valid_length": torch.tensor(size)}
        torch.testing.assert_close(step(x), fn(x, **kwargs), rtol=1e-6, atol=1e-6)
    assert [b for b, _ in fake.captured] == [8]


def test_the_mask_and_length_passed_are_the_calls():
    seen = []

    def record(x, valid_mask):
        seen.append(valid_mask.tolist())
        return x * 1.0

    step, _ = _make(record, sizes=(4,), dim=0, valid="mask")
    step(torch.zeros(3))
    step(torch.zeros(1))
    assert seen[-2:] == [[True, True, True, False], [True, False, False, False]]


def test_one_capture_per_bucket_however_many_calls_in_one_shared_pool():
    step, fake = _make(_causal_cumsum, sizes=(4, 8, 16), dim=1)
    for size in (3, 7, 2, 16, 4, 8, 1, 5, 12, 3):
        step(torch.ones(2, size))
    assert [b for b, _ in fake.captured] == [4, 8, 16]
    assert step.captures == [4, 8, 16]
    assert len(fake.pools) == 1 and {p for _, p in fake.captured} == {fake.pools[0]}
    assert step.calls == Counter({4: 5, 8: 3, 16: 2})
    # the capturing call ran fn once in the capture and replayed like every later call
    assert fake.replays == Counter({4: 5, 8: 3, 16: 2})


def test_another_batch_size_is_another_graph_in_the_same_pool():
    step, fake = _make(_causal_cumsum, sizes=(8,), dim=1)
    step(torch.ones(2, 5))
    step(torch.ones(3, 5))
    step(torch.ones(2, 6))
    assert fake.captured == [(8, fake.pools[0]), (8, fake.pools[0])]


def test_static_input_buffers_are_reused_by_copying_in():
    buffers = []

    def record(x):
        buffers.append(x.data_ptr())
        return x + 1.0

    step, _ = _make(record, sizes=(4,), dim=0)
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0, 5.0])
    assert step(a).tolist() == [2.0, 3.0]
    assert step(b).tolist() == [4.0, 5.0, 6.0]
    assert len(buffers) == 3 and len(set(buffers)) == 1     # capture + two replays
    assert buffers[0] not in (a.data_ptr(), b.data_ptr())
    assert a.tolist() == [1.0, 2.0]                           # the caller's tensor untouched


def test_outputs_are_copies_unless_asked_for_views():
    step, _ = _make(lambda x: x * 2.0, sizes=(4,), dim=0)
    first = step(torch.ones(4))
    step(torch.full((4,), 3.0))
    assert first.tolist() == [2.0, 2.0, 2.0, 2.0]
    views, _ = _make(lambda x: x * 2.0, sizes=(4,), dim=0, copy_outputs=False)
    first = views(torch.ones(4))
    views(torch.full((4,), 3.0))
    assert first.tolist() == [6.0, 6.0, 6.0, 6.0]            # the graph's output, rewritten


def test_several_outputs_are_cut_along_their_own_dims():
    def two(x):
        return x * 3.0, x.sum(dim=1), x.transpose(0, 1).contiguous()

    step, _ = _make(two, sizes=(4,), dim=1, out_dim=(1, None, 0))
    x = torch.ones(2, 3)
    scaled, total, flipped = step(x)
    assert scaled.shape == (2, 3) and flipped.shape == (3, 2)
    assert total.tolist() == [3.0, 3.0]                       # zero padding adds nothing


def test_a_size_above_the_largest_bucket_is_one_error_or_runs_uncaptured():
    from autosched.errors import UserError

    step, fake = _make(_causal_cumsum, sizes=(4, 8), dim=1)
    with pytest.raises(UserError) as e:
        step(torch.ones(2, 9))
    assert str(e.value) == ("bucketed: size 9 along dim 1 is above the largest bucket 8 "
                            "(buckets [4, 8])")
    eager, fake = _make(_causal_cumsum, sizes=(4, 8), dim=1, oversize="eager")
    x = torch.randn(2, 9)
    torch.testing.assert_close(eager(x), _causal_cumsum(x), rtol=0, atol=0)
    assert fake.captured == [] and eager.calls == Counter({None: 1})


@pytest.mark.parametrize("sizes, options, message", [
    ([], {}, "bucketed: sizes is empty; give at least one bucket size"),
    ([4, 0], {}, "bucketed: bucket sizes are positive ints, not 0"),
    ([4, 2.5], {}, "bucketed: bucket sizes are positive ints, not 2.5"),
    (8, {}, "bucketed: sizes is a list of positive ints, not 8"),
    ([4], {"valid": "lengths"}, "bucketed: valid is 'length', 'mask' or None, not 'lengths'"),
    ([4], {"oversize": "pad"}, "bucketed: oversize is 'error' or 'eager', not 'pad'"),
    ([4], {"dim": "1"}, "bucketed: dim is an int, not '1'"),
    ([4], {"out_dim": "x"}, "bucketed: out_dim is an int, None or one per output, not 'x'"),
])
def test_bad_configurations_are_one_clear_error(sizes, options, message):
    import autosched.model

    with pytest.raises(autosched.model.BucketError) as e:
        autosched.model.bucketed(_causal_cumsum, sizes=sizes, capture=FakeCapture(),
                                 **options)
    assert str(e.value) == message


@pytest.mark.parametrize("args, message", [
    ((torch.ones(3),), "bucketed: dim 1 is out of range for argument 0 of shape [3]"),
    ((torch.ones(2, 3), torch.ones(2, 5)),
     "bucketed: the arguments differ in size along dim 1: [3, 5]"),
    ((torch.ones(2, 0),), "bucketed: size 0 along dim 1; a call pads at least one row"),
    ((torch.ones(2, 3), 2.0), "bucketed: argument 1 is a float; the bucketed function "
                              "takes tensors only (bind the rest with functools.partial)"),
    ((), "bucketed: the call has no tensor arguments to pad"),
])
def test_bad_calls_are_one_clear_error(args, message):
    import autosched.model

    step, fake = _make(lambda *xs: xs[0] * 1.0, sizes=(4,), dim=1)
    with pytest.raises(autosched.model.BucketError) as e:
        step(*args)
    assert str(e.value) == message and fake.captured == []


def test_an_output_without_the_bucket_dim_asks_for_out_dim():
    import autosched.model

    step, _ = _make(lambda x: x.sum(dim=1), sizes=(4,), dim=1)
    with pytest.raises(autosched.model.BucketError) as e:
        step(torch.ones(2, 3))
    assert str(e.value) == ("bucketed: output 0 of shape [2] has no dim 1 of the bucket's "
                            "size 4; give out_dim (None for an output that is not cut)")


def test_cpu_tensors_without_a_capture_are_refused_in_one_line():
    import autosched.model

    step = autosched.model.bucketed(_causal_cumsum, sizes=[4], dim=1)
    with pytest.raises(autosched.model.BucketError) as e:
        step(torch.ones(2, 3))
    assert str(e.value) == ("bucketed: CUDA graphs capture CUDA tensors; this call's are on "
                            "cpu (pass capture= to capture otherwise)")
