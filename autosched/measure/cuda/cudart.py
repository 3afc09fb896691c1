"""The few CUDA runtime calls the run side needs (streams, events, memory, device
attributes), through ctypes on `libcudart.so.13`: the same CUDA runtime that TVM's
`libtvm_runtime_cuda.so` links, so once that is loaded this opens the very same copy
and both work in one CUDA context. No torch, no cuda-python.

Every failing call raises `CudaError` with the call, the code and the runtime's own
message. Only what is used is bound.
"""
from __future__ import annotations

import ctypes

from ...gpu_info import DEVICE_ATTRIBUTES

SONAME = "libcudart.so.13"
NOT_READY = 600  # cudaErrorNotReady: queued work has not finished (not a failure)
STREAM_NON_BLOCKING = 0x01  # cudaStreamNonBlocking: no implicit sync with stream 0



class CudaError(RuntimeError):
    """A CUDA runtime call failed; `code` is its cudaError_t."""

    def __init__(self, call: str, code: int, name: str, text: str):
        super().__init__(f"CUDA error {code} ({name}: {text}) in {call}")
        self.call, self.code = call, code


class Cudart:
    """Bound functions of the CUDA runtime. OSError when the library cannot be opened."""

    def __init__(self, soname: str = SONAME):
        self.lib = ctypes.CDLL(soname)
        self._fns: dict[str, object] = {}  # lib[name] makes a new object each time
        for name in ("cudaGetErrorName", "cudaGetErrorString"):
            self._fn(name).restype = ctypes.c_char_p
            self._fn(name).argtypes = [ctypes.c_int]
        self._fn("cudaMemsetAsync").argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t,
                                                ctypes.c_void_p]

    def _fn(self, name: str):
        if name not in self._fns:
            self._fns[name] = self.lib[name]
        return self._fns[name]

    def _call(self, name: str, *args) -> None:
        self._check(name, int(self._fn(name)(*args)))

    def _check(self, name: str, code: int) -> None:
        if code != 0:
            raise CudaError(name, code, self._fn("cudaGetErrorName")(code).decode(),
                            self._fn("cudaGetErrorString")(code).decode())

    def _handle(self, name: str, *args) -> int:
        out = ctypes.c_void_p()
        self._call(name, ctypes.byref(out), *args)
        return out.value or 0

    def device_count(self) -> int:
        n = ctypes.c_int()
        self._call("cudaGetDeviceCount", ctypes.byref(n))
        return n.value

    def attribute(self, name: str, device: int = 0) -> int:
        """A device attribute by its name in `gpu_info.DEVICE_ATTRIBUTES`."""
        value = ctypes.c_int()
        self._call("cudaDeviceGetAttribute", ctypes.byref(value), DEVICE_ATTRIBUTES[name], device)
        return value.value

    def device_name(self, device: int = 0) -> str:
        """The device's name (the first field of cudaDeviceProp, 256 chars)."""
        prop = ctypes.create_string_buffer(4096)  # larger than any cudaDeviceProp
        self._call("cudaGetDeviceProperties", prop, device)
        return prop.raw[:256].split(b"\0", 1)[0].decode(errors="replace")

    def total_memory(self) -> int:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._call("cudaMemGetInfo", ctypes.byref(free), ctypes.byref(total))
        return total.value

    def create_stream(self) -> int:
        return self._handle("cudaStreamCreateWithFlags", ctypes.c_uint(STREAM_NON_BLOCKING))

    def destroy_stream(self, stream: int) -> None:
        self._call("cudaStreamDestroy", ctypes.c_void_p(stream))

    def stream_busy(self, stream: int) -> bool:
        """Whether work queued on `stream` is still running (cudaStreamQuery)."""
        code = int(self._fn("cudaStreamQuery")(ctypes.c_void_p(stream)))
        if code == NOT_READY:
            return True
        self._check("cudaStreamQuery", code)
        return False

    def synchronize(self, stream: int) -> None:
        self._call("cudaStreamSynchronize", ctypes.c_void_p(stream))

    def create_event(self) -> int:
        return self._handle("cudaEventCreate")

    def destroy_event(self, event: int) -> None:
        self._call("cudaEventDestroy", ctypes.c_void_p(event))

    def record(self, event: int, stream: int) -> None:
        self._call("cudaEventRecord", ctypes.c_void_p(event), ctypes.c_void_p(stream))

    def elapsed_ms(self, start: int, end: int) -> float:
        """Milliseconds between two recorded events (waits for `end`)."""
        self._call("cudaEventSynchronize", ctypes.c_void_p(end))
        ms = ctypes.c_float()
        self._call("cudaEventElapsedTime", ctypes.byref(ms), ctypes.c_void_p(start),
                   ctypes.c_void_p(end))
        return float(ms.value)

    def malloc(self, nbytes: int) -> int:
        return self._handle("cudaMalloc", ctypes.c_size_t(nbytes))

    def free(self, pointer: int) -> None:
        self._call("cudaFree", ctypes.c_void_p(pointer))

    def memset_async(self, pointer: int, value: int, nbytes: int, stream: int) -> None:
        self._call("cudaMemsetAsync", ctypes.c_void_p(pointer), value, nbytes,
                   ctypes.c_void_p(stream))
