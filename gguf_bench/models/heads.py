"""Does a model draft for itself? llama.cpp's one reading of MTP (NextN) heads, from a GGUF header.

The vendored llama.cpp (0.3.36's, 0c1e570) decides in three places, and a model runs `--spec-type draft-mtp` only
where all three agree:
- `{arch}.nextn_predict_layers` > 0: without it llama_init_from_model refuses the MTP context
  (src/llama-context.cpp:3881, "context type MTP requested but model doesn't contain MTP layers");
- the NextN block's projection is in the file: `blk.{block_count - 1}.nextn.eh_proj.weight` is how
  common_speculative_types_from_gguf recognises an MTP GGUF (common/speculative.cpp:2290), and a header that declares
  heads whose tensors were stripped loads trunk-only (the `trunk_only` probe of src/models/glm4-moe.cpp:33, step35.cpp,
  mimo2.cpp), where the MTP graph then asserts `nextn.eh_proj`;
- architecture `dflash` is a sidecar, never a target with heads (speculative.cpp:2286).
How many heads there are matters too: more than one (step35) chain one per draft step, and llama.cpp drafts at most
that many (speculative.cpp:1421-1424 clamps --spec-draft-n-max, silently); one head drafts any K, step after step.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from gguf_bench.models.gguf import trunk_layers
from gguf_bench.models.parts import local_header
from gguf_bench.models.vocab import TOKENS_KEY

SIDECAR_KEYS = frozenset({TOKENS_KEY, "eagle3.target_layers", "dflash.target_layers"})  # arrays the check reads


def mtp_heads(meta: dict, tensor_names: Iterable[str]) -> int:
    """The MTP heads llama-server's draft-mtp would run on this model: 0 for none."""
    arch = meta.get("general.architecture")
    if not arch or arch == "dflash":
        return 0
    declared = int(meta.get(f"{arch}.nextn_predict_layers") or 0)
    blocks = int(meta.get(f"{arch}.block_count") or 0)
    if declared <= 0 or blocks <= 0:
        return 0
    return declared if f"blk.{blocks - 1}.nextn.eh_proj.weight" in set(tensor_names) else 0


def chained_k_limit(meta: dict, tensor_names: Iterable[str]) -> int | None:
    """The largest K draft-mtp drafts with these heads: their count where several chain (one per step), else None."""
    n = mtp_heads(meta, tensor_names)
    return n if n > 1 else None


def block_k_limit(meta: dict, spec_type: str) -> int | None:
    """The largest K a DFlash/DSpark sidecar drafts: one block of its trained size (`dflash.block_size`, 16 when
    unset) less the slot of the last token, or the whole block for DSpark's anchor-first layout; llama.cpp clamps
    --spec-draft-n-max to it, silently (common/speculative.cpp:980-1021). None for other files."""
    if meta.get("general.architecture") != "dflash":
        return None
    block = int(meta.get("dflash.block_size") or 16)
    anchor = str(meta.get("dflash.sample_from_anchor", True)).lower() in ("true", "1")
    return block if spec_type == "draft-dspark" and anchor else block - 1


def sidecar_mismatch(sidecar: dict, target: dict, sidecar_vocab: int | None = None,
                     target_vocab: int | None = None) -> str | None:
    """Why an EAGLE-3/DFlash sidecar cannot draft for this target, from both headers; None where it can (or the file
    is no sidecar). llama.cpp checks none of this (common/speculative.cpp: no vocabulary check for these types) and
    fails late or silently instead:
    - hidden size: the sidecar's `fc` reads len(target_layers) x the width it was trained on: EAGLE-3 records it
      (`eagle3.target_hidden_size`), DFlash takes its own (`dflash.embedding_length`; src/models/dflash.cpp), while the
      target hands over rows of its own `embedding_length` (speculative.cpp n_embd_enc);
    - target layers: each id is a target layer whose input is read, at most the trunk's count (llama-context.cpp
      set_embeddings_layer_inp asserts it; EAGLE-3 reads the output at exactly the count);
    - vocabulary: both converters copy the target's tokenizer into the sidecar, and it drafts ids of that vocabulary.
    `sidecar`/`target`: header metadata (the `*.target_layers` array where it was kept); vocabularies: token counts."""
    arch = sidecar.get("general.architecture")
    if arch not in ("eagle3", "dflash"):
        return None
    t_arch = target.get("general.architecture")
    have = target.get(f"{t_arch}.embedding_length")
    key = "eagle3.target_hidden_size" if arch == "eagle3" else "dflash.embedding_length"
    want = sidecar.get(key)
    if want is not None and have is not None and int(want) != int(have):
        return f"it reads target hidden states of width {int(want)} ({key}), and the target's are {int(have)} wide"
    layers = sidecar.get(f"{arch}.target_layers")
    n_layers = trunk_layers(target) if target.get(f"{t_arch}.block_count") is not None else None
    if isinstance(layers, (list, tuple)) and layers and n_layers is not None and max(layers) > n_layers:
        return f"it reads target layer {max(layers)} ({arch}.target_layers), and the target has {n_layers}"
    if sidecar_vocab and target_vocab and sidecar_vocab != target_vocab:
        return f"its vocabulary has {sidecar_vocab} tokens, and the target's {target_vocab}"
    return None


def sidecar_file_mismatch(sidecar: Path, target: Path) -> str | None:
    """sidecar_mismatch for two local files (every part of a split model read)."""
    (s_meta, _), (t_meta, _) = (local_header(p, SIDECAR_KEYS).table() for p in (sidecar, target))
    return sidecar_mismatch(s_meta, t_meta, *(len(m.get(TOKENS_KEY) or ()) or None for m in (s_meta, t_meta)))
