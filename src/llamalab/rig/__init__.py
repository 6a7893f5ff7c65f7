"""The devices a study runs on: local rpc-servers, CUDA/ROCm/Vulkan device selection, and remote rpc-servers."""
