"""The one record of a streamed request (runtimes/streamed.py) both server engines keep, and the one reader of
llama.cpp's /metrics (runtimes/server_metrics.py) both read their counters with; no server needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gguf_bench.runtimes import server_metrics
from gguf_bench.runtimes.streamed import STORED, StreamedRequest

GOLDEN = Path(__file__).parent / "data" / "golden" / "sweep-server.jsonl"

EXPOSITION = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 90
llamacpp:spec_decode_num_drafts_total 13
llamacpp:spec_decode_num_draft_tokens_total 52
llamacpp:spec_decode_num_accepted_tokens_total 25
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 11
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 7
llamacpp:predicted_tokens_seconds 1.5e+02
process_cpu_seconds_total 3.2
"""


def test_metrics_are_read_by_name_with_positions_apart():
    got = server_metrics.parse(EXPOSITION)
    assert got == {"prompt_tokens_total": 90.0, "spec_decode_num_drafts_total": 13.0,
                   "spec_decode_num_draft_tokens_total": 52.0, "spec_decode_num_accepted_tokens_total": 25.0,
                   "spec_decode_num_accepted_tokens_per_pos_total[0]": 11.0,
                   "spec_decode_num_accepted_tokens_per_pos_total[1]": 7.0, "predicted_tokens_seconds": 150.0}
    before = {"spec_decode_num_drafts_total": 10.0, "spec_decode_num_draft_tokens_total": 40.0,
              "spec_decode_num_accepted_tokens_total": 20.0, "spec_decode_num_accepted_tokens_per_pos_total[0]": 8.0}
    assert server_metrics.spec_counters(before, got) == (3, 12, 5)
    assert server_metrics.accepted_at(before, got) == [3, 7]
    assert server_metrics.accepted_at({}, {"prompt_tokens_total": 1.0}) == []
    assert server_metrics.parse("# no llama.cpp here\nfoo 1\n") == {}


def test_a_llama_cpp_request_stores_what_stored_records_hold():
    """The figures of a request llama-server timed come back as the record stored them (the golden file's requests:
    the same keys, in the same order, the same values)."""
    for line in GOLDEN.read_text().splitlines():
        for q in json.loads(line)["metrics"]["requests"]:
            timings = {k: q[k] for k in ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "draft_n",
                                         "draft_n_accepted")}
            req = StreamedRequest(q["client"], q["prompt_id"], 8, q["sent_s"], q["first_token_s"], q["end_s"],
                                  text=q["text"], timings=timings)
            assert list(req.stored()) == list(q) == list(STORED)
            assert req.stored() == q
            assert req.tokens_per_s == pytest.approx(1000.0 * (q["predicted_n"] - 1) / q["predicted_ms"])  # the first: the prompt's


def test_what_a_server_did_not_say_is_none_never_a_guess():
    """No timings: usage's counts, else -n where it stopped at the length asked, and the client's own times."""
    told = StreamedRequest(0, "p", 16, 0.0, 1.0, 3.0, finish="stop", usage={"completion_tokens": 20, "prompt_tokens": 7})
    assert (told.predicted_n, told.tokens_from, told.prompt_n, told.prompt_ms) == (20, "usage", 7, None)
    assert told.decode_s == 2.0 and told.predicted_ms == 2000.0 and told.tokens_per_s == 9.5  # 19 after the first
    cut = StreamedRequest(0, "p", 16, 0.0, 1.0, 3.0, finish="length")
    assert (cut.predicted_n, cut.tokens_from, cut.draft_n, cut.draft_n_accepted) == (16, "length", None, None)
    failed = StreamedRequest(1, "p", 16, 0.5, error="gone")
    assert failed.stored() == dict.fromkeys(STORED) | {"client": 1, "prompt_id": "p", "sent_s": 0.5, "text": "",
                                                       "error": "gone"}
    assert (failed.ttft_s, failed.latency_s, failed.tokens_per_s) == (None, None, None)
