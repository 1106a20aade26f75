"""The SentencePiece kind (the default): unigram or BPE (tokenizer.model_type), lossless, its model file a .model.

Reading (SentencePieceText: seqio's SentencePieceVocabulary in Python), training (trainer options, the
lines a model learns from), the bytes each piece stands for, and its Hugging Face tokenizer.json. The
data path's seqio wrapper is pretrain/vocab/pipeline.py's.

The model is unigram (or BPE, as ranked merges) with byte fallback, identity normalisation and a dummy-prefix
space. SentencePiece first cuts the text into words, each a run of spaces followed by non-spaces, then segments
each word; the tokenizer.json's pre-tokenizer cuts the same words, so the unigram lattice is the same. The
objectives' special pieces and seqio's sentinels are user pieces, matched whole wherever they occur; the
tokenizer.json's pre-tokenizer cuts them out after the normaliser, as SentencePiece does (hf_tokenizer).
"""

import functools
import io
import os
import re

import sentencepiece as spm
import tokenizers
from sentencepiece import sentencepiece_model_pb2
from tokenizers import decoders, models as tok_models, normalizers, pre_tokenizers

from pretrain.system import files
from pretrain.system.errors import UserError
from pretrain.vocab import ids, long_texts

SPACE = "\u2581"
# SentencePiece skips longer sentences (its max_sentence_length); documents are fed paragraph by paragraph,
# a longer paragraph in pieces.
MAX_LINE_BYTES = 4192
_PIECE = sentencepiece_model_pb2.ModelProto.SentencePiece


def processor(data: bytes):
  """The SentencePiece processor in `data` with our control ids, or None."""
  try:
    processor = spm.SentencePieceProcessor(model_proto=data)
  except RuntimeError:
    return None
  ok = processor.get_piece_size() > 0 and (processor.pad_id(), processor.eos_id(), processor.unk_id()) == (
      ids.PAD_ID, ids.EOS_ID, ids.UNK_ID)
  return processor if ok else None


def other_ids(data: bytes) -> tuple[int, int, int] | None:
  """The (pad, eos, unk) ids of a SentencePiece model in `data` whose ids are not ours (sentencepiece's defaults,
  Llama's), else None."""
  try:
    found = spm.SentencePieceProcessor(model_proto=data)
  except RuntimeError:
    return None
  ids_found = (found.pad_id(), found.eos_id(), found.unk_id())
  return ids_found if found.get_piece_size() > 0 and ids_found != (ids.PAD_ID, ids.EOS_ID, ids.UNK_ID) else None


def with_sentinels(model: bytes, extra_ids: int) -> bytes:
  """The SentencePiece model with seqio's sentinels appended as it appends them: `▁<extra_id_N>`, user pieces
  (matched whole in the text), N counting down."""
  proto = sentencepiece_model_pb2.ModelProto.FromString(model)
  for i in reversed(range(extra_ids)):
    proto.pieces.add(piece=f"\u2581<extra_id_{i}>", score=0.0, type=_PIECE.USER_DEFINED)
  return proto.SerializeToString()


def piece_bytes(model: bytes, vocab_size: int) -> list[bytes | None]:
  """The bytes each id of a SentencePiece model stands for ('\u2581' is a space); None for control ids, the
  objectives' special pieces and the sentinels, which stand for no text."""
  table = [None] * vocab_size
  for i, p in enumerate(sentencepiece_model_pb2.ModelProto.FromString(model).pieces[:vocab_size]):
    if p.type == _PIECE.BYTE:
      table[i] = bytes([int(p.piece[3:-1], 16)])
    elif p.type == _PIECE.NORMAL:
      table[i] = p.piece.replace("\u2581", " ").encode("utf-8")
  return table


class SentencePieceText:
  """A SentencePiece vocabulary as seqio's SentencePieceVocabulary encodes and decodes in Python."""

  kind = "sentencepiece"
  workdir_name = "spm.model"
  pad_id, eos_id, unk_id = ids.PAD_ID, ids.EOS_ID, ids.UNK_ID

  def __init__(self, path: str, data: bytes, extra_ids: int = ids.EXTRA_IDS):
    self.file, self.extra_ids = path, extra_ids
    self.identity = with_sentinels(data, extra_ids)  # seqio's sp_model, which keys the token stores.
    self.tokenizer = spm.SentencePieceProcessor(model_proto=self.identity)
    self.vocab_size = self.tokenizer.get_piece_size()

  def encode(self, text: str) -> list[int]:
    return self.tokenizer.encode_as_ids(text)

  def decode(self, token_ids) -> str:
    """The text of `token_ids` up to the first EOS; ids past the vocabulary read as unknown."""
    token_ids = [ids.UNK_ID if i >= self.vocab_size else int(i) for i in token_ids]
    eos = ids.EOS_ID
    return self.tokenizer.decode_ids(token_ids[:token_ids.index(eos) + 1] if eos in token_ids else token_ids)

  @functools.cached_property
  def piece_bytes(self) -> list[bytes | None]:
    return piece_bytes(self.identity, self.vocab_size)


def trainer_options(special) -> dict:
  """Trainer options besides the size and type; part of the cache key. The tokenizer is lossless,
  decode(encode(text)) == text: no normalisation, white space kept, rare characters spelled as bytes. `special`:
  the special tokens, each made one piece."""
  return dict(pad_id=ids.PAD_ID, eos_id=ids.EOS_ID, unk_id=ids.UNK_ID, bos_id=-1, user_defined_symbols=list(special),
              character_coverage=0.9995, split_digits=True, byte_fallback=True, normalization_rule_name="identity",
              remove_extra_whitespaces=False, allow_whitespace_only_pieces=True)


def cache_options(model_type: str, extra_ids: int, special) -> list:
  """What, besides the size and the text, makes a trained model differ (its cache key): how the text becomes
  training lines too (long paragraphs were once left out, now cut)."""
  return [model_type, extra_ids, trainer_options(special), {"max_line_bytes": MAX_LINE_BYTES,
                                                            "long_paragraphs": "cut"}]


def _training_lines(texts):
  """Paragraphs, newlines kept, so that pieces for line breaks and indentation are learned."""
  for text in texts:
    for paragraph in text.split("\n\n"):
      for piece in long_texts.pieces(paragraph.encode("utf-8"), MAX_LINE_BYTES):
        if piece.strip():
          yield piece.decode("utf-8")


class TooFewPieces(UserError):
  """The text makes fewer pieces than asked (`most` of `pieces`): its fix is in tokenizer.vocab_size's terms, which
  count the sentinels too (vocab.kinds.train)."""

  def __init__(self, problem: str, pieces: int, most: int):
    super().__init__(problem, f"the text makes at most {most} pieces: lower tokenizer.vocab_size by "
                              f"{pieces - most} or more, or give more text")
    self.pieces, self.most = pieces, most


def train(texts, pieces: int, model_type: str, special: tuple[str, ...]) -> bytes:
  """A model of `pieces` pieces (the sentinels not counted) trained on an iterable of documents, `special` the
  tokens made single pieces."""
  fed = {"lines": 0, "chars": 0}

  def counted(lines):
    for line in lines:
      fed["lines"] += 1
      fed["chars"] += len(line)
      yield line

  model = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=counted(_training_lines(texts)), model_writer=model, vocab_size=pieces,
        model_type=model_type, num_threads=os.cpu_count() or 1, minloglevel=2,
        logstream=open(os.devnull, "w"), **trainer_options(special))
  except RuntimeError as e:
    problem = (f"SentencePiece could not train a {pieces}-piece model on {fed['chars']:,} characters in "
               f"{fed['lines']:,} lines of text ({e})")
    most = re.search(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)", str(e))
    if most:
      raise TooFewPieces(problem, pieces, int(most[1])) from None
    raise UserError(problem, "lower tokenizer.vocab_size or give more text") from None
  return model.getvalue()


def hf_tokenizer(vocabulary) -> tokenizers.Tokenizer:
  """The tokenizer.json (without its post-processor) that encodes as the SentencePiece model does, id for id, read
  as HF_TOKENIZER_CONFIG says (split_special_tokens: no added token is cut out of the text before the pipeline):
  SentencePiece's normaliser (its rules where the model has any, the dummy prefix before the whole text, each space
  a '▁'), its user pieces (the
  objectives' special pieces, seqio's sentinels '▁<extra_id_N>') cut out whole, its words, its model. Control,
  unknown and byte pieces are never read from text, as in SentencePiece: a text's '</s>' is spelled."""
  with files.open_file(vocabulary.file, "rb") as f:  # The model as trained; seqio's sentinels added as seqio does.
    proto = sentencepiece_model_pb2.ModelProto.FromString(with_sentinels(f.read(), vocabulary.extra_ids))
  user = [p.piece for p in proto.pieces if p.type == _PIECE.USER_DEFINED]
  if proto.trainer_spec.model_type == proto.trainer_spec.BPE:
    # No merge makes a user piece: a word that is a piece reads as that piece (ignore_merges), as SentencePiece's
    # BPE reads a word that is a learned piece (its merges made the piece). Not as SentencePiece: the text of a
    # control or byte piece written right after a user piece ("[MASK]</s>") is such a word, read as its id.
    model = tok_models.BPE({p.piece: i for i, p in enumerate(proto.pieces)}, _bpe_merges(proto),
                           unk_token=proto.pieces[ids.UNK_ID].piece, byte_fallback=True, ignore_merges=True)
  else:
    model = tok_models.Unigram([(p.piece, _unigram_score(p)) for p in proto.pieces], unk_id=ids.UNK_ID,
                               byte_fallback=True)
  tokenizer = tokenizers.Tokenizer(model)
  spec = proto.normalizer_spec
  dummy_prefix = spec.add_dummy_prefix
  tokenizer.normalizer = normalizers.Sequence([
      # A model of another normalisation than the project's identity (a user's, nmt_nfkc by default): its rules,
      # compiled into the model, and its removal of spaces at the ends and in runs.
      *([normalizers.Precompiled(spec.precompiled_charsmap)] if spec.precompiled_charsmap else []),
      *([normalizers.Replace(tokenizers.Regex("^ +| +$"), ""), normalizers.Replace(tokenizers.Regex(" {2,}"), " ")]
        if spec.remove_extra_whitespaces else []),
      *([normalizers.Prepend(SPACE)] if dummy_prefix else []),
      normalizers.Replace(" ", SPACE)])
  # SentencePiece matches its user pieces first, the longest where two start together; then each word is a run
  # of spaces and what follows up to the next space.
  whole = "|".join(re.escape(p) for p in sorted(user, key=len, reverse=True))
  tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
      *([pre_tokenizers.Split(tokenizers.Regex(whole), behavior="isolated")] if user else []),
      pre_tokenizers.Split(tokenizers.Regex(f"{SPACE}+[^{SPACE}]*|[^{SPACE}]+"), behavior="isolated"),
  ])
  tokenizer.decoder = decoders.Sequence([
      decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse(),
      *([decoders.Strip(" ", 1, 0)] if dummy_prefix else []),
  ])
  # Special: left out of decode(skip_special_tokens=True), as transformers' T5 tokenizer leaves out its sentinels.
  special = [p.piece for p in proto.pieces if p.type in (_PIECE.CONTROL, _PIECE.UNKNOWN, _PIECE.USER_DEFINED)]
  tokenizer.add_special_tokens([tokenizers.AddedToken(p, normalized=False) for p in special])
  return tokenizer


# What transformers must read with the tokenizer.json: special tokens are not cut out of the text (hf_tokenizer).
HF_TOKENIZER_CONFIG = {"split_special_tokens": True}
# A score that loses every unigram lattice to any spelling of the same text.
_NEVER = -1e9


def _unigram_score(piece) -> float:
  """A piece's score in the tokenizer.json's unigram model: a user piece always wins where it occurs (its own
  pre-token), control, unknown and byte pieces never do (SentencePiece never reads them from text)."""
  return {_PIECE.NORMAL: piece.score, _PIECE.USER_DEFINED: 0.0}.get(piece.type, _NEVER)


def _bpe_merges(proto) -> list[tuple[str, str]]:
  """SentencePiece's BPE joins the adjacent pair whose union is the piece of the highest score; as ranked merges:
  every split of each learned piece into two pieces, the pieces in the order of their scores."""
  piece_ids = {p.piece: i for i, p in enumerate(proto.pieces)}
  learned = [p for p in proto.pieces if p.type == _PIECE.NORMAL]
  merges = []
  for p in sorted(learned, key=lambda p: -p.score):  # Stable: ties keep the model's order.
    splits = [(p.piece[:k], p.piece[k:]) for k in range(1, len(p.piece))]
    merges += sorted(((a, b) for a, b in splits if a in piece_ids and b in piece_ids),
                     key=lambda ab: (piece_ids[ab[0]], piece_ids[ab[1]]))
  return merges


class SentencePiece:
  """The kind, as the registry (pretrain/vocab/kinds.py) reads every kind."""
  name, workdir_name, suffix, learns = "sentencepiece", "spm.model", ".model", True
  cache_prefix, what = "spm", "SentencePiece model"  # Its cached files' names; what its model file is.

  def parse(self, data: bytes) -> bool:
    return processor(data) is not None

  def text(self, path: str, data: bytes, extra_ids: int) -> SentencePieceText:
    return SentencePieceText(path, data, extra_ids)

  def size(self, vocab_size: int, extra_ids: int, special: tuple[str, ...]) -> int:
    return vocab_size - extra_ids

  def train(self, texts, pieces: int, special: tuple[str, ...], model_type: str | None = None) -> bytes:
    """`model_type`: unigram (None) or bpe."""
    return train(texts, pieces, model_type or "unigram", special)

  cache_options = staticmethod(cache_options)
  hf_tokenizer = staticmethod(hf_tokenizer)
  hf_tokenizer_config = HF_TOKENIZER_CONFIG


KIND = SentencePiece()
