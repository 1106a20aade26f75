"""Penn Treebank, word level, aiming at Zaremba et al. 2014's regularised LSTMs (medium: 82.7 test perplexity)
within about 2 hours on 2 CPU cores: configs/ptb_small.py's setting, 384 wide, more dropout and four times the
steps.

Zaremba's LSTMs read the text as one stream, their state carried across sentences, for 39 epochs; this model
reads one sentence at a time (as the count models do) for about 13 epochs. docs/ptb.md says where it lands.
"""

from pretrain.configs import ptb_small
from pretrain.configs import _zoo


def get_config():
  return _zoo.apply(ptb_small.get_config(), {
      "model.d_model": 384, "model.num_heads": 6, "model.num_kv_heads": 6, "model.mlp_dim": 1536,
      "model.dropout": 0.4, "train.steps": 3000, "train.eval_every": 500, "train.checkpoint_every": 500,
  })
