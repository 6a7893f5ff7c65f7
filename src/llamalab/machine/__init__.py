"""What this machine has: GPUs and drivers (NVML, rocm-smi), system info and load, the backend "auto" picks, and
`llamalab doctor`."""
