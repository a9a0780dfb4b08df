"""Predictions from stored measurements and sizes: the cost model of speculative decoding, llama-server's costs, and
the drafts ranking made before any download."""
