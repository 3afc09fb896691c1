"""Tensors on a device through TVM's runtime alone (no `import tvm`): allocate, copy in
and out, synchronise, ask whether the device exists.

These call the global functions `libtvm_runtime.so` registers (the same ones
`tvm.runtime.Tensor` uses), so a run worker or a bundle measurer needs only `tvm_ffi`,
the runtime libraries (`autosched.tvm_runtime`) and numpy. Arrays travel as raw bytes,
so dtypes numpy lacks (bfloat16, float8 through ml_dtypes) copy unchanged.
"""
from __future__ import annotations

import ctypes

import numpy as np

DEVICE_TYPES = {"cpu": 1, "cuda": 2}  # DLPack device type codes
ATTR_EXIST = 0                        # TVM's DeviceAttrKind kExist


def _fn(name: str):
    import tvm_ffi

    return tvm_ffi.get_global_func(name)


def device(kind: str, index: int = 0):
    """The tvm_ffi Device `kind` ("cpu" or "cuda") number `index`."""
    import tvm_ffi

    return tvm_ffi.device(kind, index)


def device_exists(dev) -> bool:
    """Whether the runtime sees this device (for CUDA: a driver and a visible GPU)."""
    return int(_fn("runtime.GetDeviceAttr")(dev.dlpack_device_type(), dev.index,
                                            ATTR_EXIST)) != 0


def empty(shape, dtype: str, dev):
    """An uninitialised tensor of `shape` and TVM dtype name `dtype` on `dev`."""
    import tvm_ffi

    return _fn("runtime.TVMTensorAllocWithScope")(
        tvm_ffi.Shape([int(d) for d in shape]), tvm_ffi.dtype(dtype), dev, None)


def to_device(array: np.ndarray, dtype: str, dev):
    """A new tensor on `dev` holding a copy of `array` (whose dtype is `dtype`)."""
    src = np.ascontiguousarray(array)
    tensor = empty(src.shape, dtype, dev)
    _fn("runtime.TVMTensorCopyFromBytes")(tensor, ctypes.c_void_p(src.ctypes.data),
                                          src.nbytes)
    return tensor


def to_host(tensor, shape, np_dtype) -> np.ndarray:
    """A numpy copy of `tensor` (synchronous: waits for the copy)."""
    out = np.empty(tuple(shape), dtype=np_dtype)
    _fn("runtime.TVMTensorCopyToBytes")(tensor, ctypes.c_void_p(out.ctypes.data), out.nbytes)
    return out


def sync(dev, stream: int = 0) -> None:
    """Wait for everything queued on `stream` of `dev` (0: the device's default)."""
    _fn("runtime.Device_StreamSync")(dev, stream)
