"""CUDA pieces of measurement.

Where things are:
- compiler.py: the one CUDA compile path (`build_cuda`: nvcc or NVRTC, a fatbin for the
  target's arch);
- cudart.py: the CUDA runtime through ctypes; timing.py: `CudaTimer` (CUDA events,
  L2 flushed) used by the run worker;
- fatbin.py, sass.py: carve the fatbin out of a library and count its SASS opcodes.
"""
