"""The engines' sessions: the protocol a sweep drives (protocol), and one module per engine (python: gguf-bench's
loop; server: llama-server processes it starts; endpoint: servers someone else started)."""
