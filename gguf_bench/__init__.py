"""gguf-bench: benchmark speculative decoding of GGUF model pairs."""
__version__ = "0.1.0"
