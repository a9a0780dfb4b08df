"""The command flows beside the sweep: tune and its calibration, tune through llama-server, drafts --measure and
--twins, plan --measure, the quality commands, and the bandwidth of `gguf-bench machine`."""
