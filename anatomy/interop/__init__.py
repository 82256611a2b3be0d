"""Interop: torch.nn (torch_nn.py), Hugging Face (hf.py), safetensors checkpoints (safetensors_io.py), RoPE layouts."""
