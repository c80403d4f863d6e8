"""The CUDA backend: CUDA C from the loop IR, compiled with NVRTC or nvcc, launched through the
CUDA driver API.  See :mod:`.kernel` for the entry point."""
