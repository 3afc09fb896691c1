"""MetaSchedule's per-store features (TVM's PerStoreFeature) as one optional group.

MetaSchedule gives one 164-wide vector per buffer store; a fixed-length vector needs an
aggregate, so this group is the element-wise max and mean over the stores.
"""
from __future__ import annotations

from functools import lru_cache

_WIDTH = 164


def psf_names() -> list[str]:
    return [f"psf.{agg}{i}" for agg in ("max", "mean") for i in range(_WIDTH)]


@lru_cache(maxsize=2)
def _extractor(target_kind: str):
    import tvm
    from tvm.s_tir import meta_schedule as ms

    target = tvm.target.Target({"kind": target_kind})
    return ms.feature_extractor.PerStoreFeature(), target


def _context(mod, target):
    """A TuneContext built through its FFI constructor: the Python constructor first
    imports every tensor intrinsic TVM ships (minutes on a loaded machine), which the
    feature extractor does not need."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule import _ffi_api
    from tvm.s_tir.meta_schedule.logging import get_logger, get_logging_func

    ctx = ms.TuneContext.__new__(ms.TuneContext)
    ctx.__init_handle_by_constructor__(_ffi_api.TuneContext, mod, target, None, None, "main",
                                       1, -1, get_logging_func(get_logger(__name__)))
    return ctx


def psf_vector(mod, target_kind: str) -> list[float]:
    """Max and mean of MetaSchedule's per-store features of a scheduled module."""
    import numpy as np
    from tvm import s_tir
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

    extractor, target = _extractor(target_kind)
    ctx = _context(mod, target)
    cand = MeasureCandidate(s_tir.Schedule(mod), ArgInfo.from_prim_func(mod["main"]))
    feats = extractor.extract_from(ctx, [cand])[0].numpy()
    if feats.shape[0] == 0:
        return [0.0] * (2 * _WIDTH)
    return list(np.concatenate([feats.max(axis=0), feats.mean(axis=0)]).astype(float))
