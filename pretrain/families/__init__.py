"""Model families: what sits between an objective's examples and a model (base.py says what a family owns).

The four kinds of model are here, a module each (decoder_only.py: causal and prefix LM; encoder_decoder.py;
encoder_only.py); an objective that brings its own model or loss terms (ELECTRA, NSP/SOP, contrastive)
subclasses one in its own module. The rules between a family and the config's fields are checked with the config
(pretrain/config/rules.py: Family.check, and the options only some families take).
"""

from pretrain.families.base import (DECODER_FEATURES, ENCODER_FEATURES, EOS_ID, Family,  # pylint: disable=unused-import
                                    bits_per_byte, cut_left, encoder_decoder_row, encoder_row, ratio, totals_ratio,
                                    until_eos)
from pretrain.families.decoder_only import CausalLM, PrefixLM
from pretrain.families.encoder_decoder import EncoderDecoder
from pretrain.families.encoder_only import EncoderOnly

CAUSAL_LM, PREFIX_LM, ENCODER_DECODER, ENCODER_ONLY = CausalLM(), PrefixLM(), EncoderDecoder(), EncoderOnly()
