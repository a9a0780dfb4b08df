"""models/resumable.py downloads through huggingface_hub.file_download.http_get, which is not public API: the installed
huggingface_hub must take the call it makes, and one that does not (a release that renamed, removed or changed it) is
one `Error:` line naming the version and the pin to install, never a TypeError from inside a download (issue 48, 4)."""

from __future__ import annotations

from typing import Any, BinaryIO

import huggingface_hub
import pytest
from cli_helpers import assert_user_error, invoke
from huggingface_hub import file_download

from gguf_bench.errors import DownloadError
from gguf_bench.models import resumable


@pytest.fixture
def fresh_check():
    """checked_http_get runs once per process (functools.cache): each test here checks anew."""
    resumable.checked_http_get.cache_clear()
    yield
    resumable.checked_http_get.cache_clear()


def http_get_1_0(url: str, temp_file: BinaryIO, *, resume_size: int = 0, headers: dict[str, Any] | None = None,
                 expected_size: int | None = None, displayed_filename: str | None = None, _nb_retries: int = 5,
                 _tqdm_bar=None) -> None:
    """huggingface_hub 1.0.0's signature (before tqdm_class): what a release that changes http_get looks like."""


def test_the_installed_huggingface_hub_takes_the_call_resumable_makes(fresh_check):
    """Fails, with the fix in its message, the day the installed huggingface_hub changes http_get: then pin
    huggingface-hub below that version in pyproject.toml, or follow the change in models/resumable.py."""
    assert resumable.http_get_change(file_download.http_get) is None
    assert resumable.checked_http_get() is file_download.http_get


def test_a_changed_or_missing_http_get_is_named():
    assert "tqdm_class" in resumable.http_get_change(http_get_1_0)
    assert resumable.http_get_change(None) == "it is gone"
    assert resumable.http_get_change(lambda url, sink, **kw: None) is None  # **kwargs takes every keyword
    assert resumable.supported_pin("2.9.0") == "huggingface-hub>=1.1,<2.9.0"
    assert resumable.supported_pin("1.0.1") == "huggingface-hub>=1.1,<3"  # older than supported: the range


def test_the_pin_in_pyproject_is_the_one_the_error_names():
    from pathlib import Path

    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert f'"huggingface-hub>={resumable.OLDEST_HUB},<3"' in text


@pytest.mark.parametrize("replacement, needle", [(http_get_1_0, "tqdm_class"), (None, "it is gone")])
def test_a_download_through_a_changed_http_get_is_one_line_with_the_pin(fresh_check, monkeypatch, tmp_path,
                                                                        replacement, needle):
    if replacement is None:
        monkeypatch.delattr(file_download, "http_get")
    else:
        monkeypatch.setattr(file_download, "http_get", replacement)
    with pytest.raises(DownloadError):
        resumable.checked_http_get()
    resumable.checked_http_get.cache_clear()
    reg = tmp_path / "models.yaml"
    reg.write_text("default: p\nmodels:\n  t: {hf: {repo: acme/x-GGUF, file: x.gguf}}\n"
                   "  d: {hf: {repo: acme/x-GGUF, file: x.gguf}}\npairs:\n  p: {target: t, draft: d}\n")
    result = invoke("download", "p", "--registry", str(reg))  # checked before any request: no hub is needed
    version = huggingface_hub.__version__
    assert_user_error(result, f"huggingface_hub {version} changed", "file_download.http_get", needle,
                      f"pip install 'huggingface-hub>=1.1,<{version}'")
