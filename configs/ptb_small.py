"""Penn Treebank, word level: a decoder-only transformer meant to beat the Kneser-Ney 5-gram (141.2 test
perplexity, Mikolov et al. 2011) on 2 CPU cores in under 30 minutes.

The `ptb` extra (pip install -e '.[ptb]') brings the text; the words vocabulary holds its 10,000 types (the
end of sentence among them). A sentence is a document: each row packs whole sentences, none sees another, as
the count models read them (--config.data.context=stream reads the text as one stream instead, as the recurrent
rows of docs/ptb.md do; evaluate it with `pretrain eval ... --window=128 --stride=64`). 4 layers of width 256, tied embeddings, dropout 0.3 (the Penn Treebank's 930k
training words overfit a model this size within a few epochs). `pretrain eval --workdir=DIR --task=ptb_clm
--split=test` prints the per-word test perplexity; docs/ptb.md has the published rows and ours
(pretrain experiment ptb).
"""

from pretrain.configs import _zoo


def get_config():
  return _zoo.apply(_zoo.base(), {
      "data.source": "ptb", "tokenizer.kind": "words", "tokenizer.vocab_size": 10_240, "tokenizer.extra_ids": 0,
      "model.d_model": 256, "model.num_layers": 4, "model.num_heads": 4, "model.num_kv_heads": 4,
      "model.head_dim": 64, "model.mlp_dim": 1024, "model.dropout": 0.3, "model.tie_embeddings": True,
      "train.batch_size": 32, "train.steps": 1200, "optimizer.warmup_steps": 100,
      "train.eval_every": 250, "train.eval_batches": 40, "train.checkpoint_every": 500,
  })
