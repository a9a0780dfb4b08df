"""What a sweep sends: prompts (built-in and JSONL), workloads (HumanEval, Spec-Bench, MT-Bench), the depth
filler, and the prompts prepared once in the target's tokens."""
