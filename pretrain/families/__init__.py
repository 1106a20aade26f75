"""Model families: what sits between an objective's examples and a model (base.py says what a family owns).

The four kinds of model are here, a module each (decoder_only.py: causal and prefix LM; encoder_decoder.py;
encoder_only.py); an objective that brings its own model or loss terms (ELECTRA, NSP/SOP, contrastive)
subclasses one in its own module. The checks below span a family and the config's model fields.
"""

from pretrain.families.base import (DECODER_FEATURES, ENCODER_FEATURES, EOS_ID, Family,  # pylint: disable=unused-import
                                    bits_per_byte, cut_left, encoder_decoder_row, encoder_row, ratio, totals_ratio,
                                    until_eos)
from pretrain.families.decoder_only import CausalLM, PrefixLM
from pretrain.families.encoder_decoder import EncoderDecoder
from pretrain.families.encoder_only import EncoderOnly
from pretrain.system.errors import UserError


def check_feed_forward(cfg, family: Family) -> None:
  """model.feed_forward=relu (T5 v1.0's and Switch's plain ReLU layers) is the encoder-decoder's only."""
  if cfg.model.feed_forward != "gated" and family.architecture != "t5":
    raise UserError(f"model.feed_forward={cfg.model.feed_forward!r} is for the encoder-decoder (T5 v1.0, Switch); "
                    f"the {family.name} model's feed-forward layers are gated: set model.feed_forward='gated'")


def check_moe(cfg, family: Family) -> None:
  """Refuses mixture-of-experts settings (model.moe_*) that the family or the model's shape cannot take."""
  m = cfg.model
  if not m.moe_experts:
    return
  if not family.moe:
    raise UserError(f"model.moe_experts={m.moe_experts}: the {family.name} objective's loss does not take the "
                    "experts' balancing terms; set model.moe_experts=0 (a dense model) or train another objective")
  if m.moe_top_k > m.moe_experts:
    raise UserError(f"model.moe_top_k={m.moe_top_k} is more than the {m.moe_experts} experts (model.moe_experts); "
                    "route each token to at most that many")
  depths = {"model.num_layers": m.num_layers, "model.num_decoder_layers": m.num_decoder_layers}
  for name, depth in depths.items():
    if depth and m.moe_every > depth:
      raise UserError(f"model.moe_every={m.moe_every} is more than {name}={depth}: no layer would have experts; "
                      "lower model.moe_every")
    if depth and m.scan_layers and depth % m.moe_every:
      raise UserError(f"with model.scan_layers the scan repeats units of model.moe_every={m.moe_every} layers; "
                      f"{name}={depth} is not a multiple: change one, or set model.scan_layers=False")
  if m.moe_experts % cfg.mesh.expert:
    raise UserError(f"model.moe_experts={m.moe_experts} does not split over mesh.expert={cfg.mesh.expert} devices; "
                    "make the experts a multiple of mesh.expert")


CAUSAL_LM, PREFIX_LM, ENCODER_DECODER, ENCODER_ONLY = CausalLM(), PrefixLM(), EncoderDecoder(), EncoderOnly()
