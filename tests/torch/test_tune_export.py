"""The whole way: the training example tunes its kernels, exports them with
`autosched export`'s code, loads them as torch ops and trains through them."""
from __future__ import annotations

import autosched.torch as at
from support.torch_library import MLP_SHAPES


def test_example_tunes_exports_and_trains(train_mlp, tmp_path, capsys):
    shapes = train_mlp.Shapes(**MLP_SHAPES)
    library = train_mlp.build_library(shapes, str(tmp_path), trials=0)
    lib = at.load_library(library)
    assert set(lib.ops) == set(train_mlp.MLP_WORKLOADS)
    assert len(lib.manifest.kernels) == 10
    assert all(k.record_id is not None and k.latency_s > 0 for k in lib.manifest.kernels)
    ours, _ = train_mlp.train(train_mlp.autosched_ops(), shapes, steps=60)
    eager, _ = train_mlp.train(train_mlp.eager_ops(), shapes, steps=60)
    assert max(abs(a - b) / b for a, b in zip(ours, eager)) < 1e-4
