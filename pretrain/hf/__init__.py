"""Hugging Face format: export a run to a directory `transformers` loads, and
import such a directory to continue pre-training.

One module per architecture, listed once in ARCHITECTURES: decoder-only models
are Llama (llama.py), or with experts Mixtral (mixtral.py) or Qwen2-MoE
(qwen2_moe.py); encoder-decoder models T5 v1.1 (t5.py), or with experts the
Switch Transformer (switch_transformers.py); an ELECTRA run exports its
discriminator in a format of its own (electra.py), which is not imported. A
module says its architecture, model_type, the family it serves (a family's
`hf`) and which of that family's model configs it holds (matches), and maps
the config and the weights both ways. The tokenizer is the run's vocabulary as
tokenizer.json (pretrain/vocab/hf_export.py), with a SentencePiece vocabulary's
.model file beside it.
"""

from pretrain.hf.architectures import ARCHITECTURES, WEIGHTS, architecture, imported, scaled_queries
from pretrain.hf.exporting import export, refuse_written
from pretrain.hf.importing import import_config, import_params, init_config, load_weights, read_config

__all__ = ["ARCHITECTURES", "WEIGHTS", "architecture", "export", "import_config", "import_params", "imported",
           "init_config", "load_weights", "read_config", "refuse_written", "scaled_queries"]
