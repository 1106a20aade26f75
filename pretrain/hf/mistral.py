"""transformers' MistralForCausalLM -> decoder-only models, imported only (a dense run exports as Llama): Llama's
layout and names (llama.py) with sliding-window attention, which ours reproduces where the window is off (Mistral
v0.2 and later; null in config.json)."""

from pretrain.hf import llama

ARCHITECTURE, MODEL_TYPE, FAMILY = "MistralForCausalLM", "mistral", "llama"
IMPORTS, PREPENDS_BOS = True, True


def matches(model_cfg) -> bool:
  del model_cfg  # Llama's export holds every dense model.
  return False


def model_config(hf: dict) -> tuple[dict, list[str]]:
  settings, unsupported = llama.model_config(hf)
  return settings, unsupported + (["sliding_window"] if hf.get("sliding_window") else [])


def from_hf(state: dict, model_cfg) -> dict:
  return llama.from_hf(state, model_cfg)
