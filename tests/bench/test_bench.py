"""`pretrain bench` and `pretrain estimate-memory` time and size the step that training runs, for every family.

Both build their run like training does (pretrain.run), so a prefix-LM step reads decoder_causal_attention and
train.microbatches accumulates; the model features come from the family's seqio converter, and equal what the
data pipeline yields.
"""

import subprocess
import sys

import pytest

from pretrain.commands import bench, estimate_memory
from tests.conftest import REPO, TINY, tiny_config

FAMILY_ARGS = {
    "clm": ["--config.data.objective=clm"],
    "prefix_lm_decoder": ["--config.data.objective=prefix_lm_decoder", "--config.data.inputs_length=40",
                          "--config.data.targets_length=8"],
    "span_corruption": ["--config.data.objective=span_corruption", "--config.data.inputs_length=32",
                        "--config.data.targets_length=16"],
    "mlm": ["--config.data.objective=mlm"],
}


@pytest.mark.parametrize("objective", FAMILY_ARGS)
def test_model_features_are_the_pipelines(objective, cache_dir, vocabulary):
  del vocabulary  # Built first, so the run reuses it.
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top
  run = run_lib.Run.build_with_data(tiny_config(*FAMILY_ARGS[objective], f"--config.data.cache_dir={cache_dir}"))
  real = next(run.batches("validation", shuffle=False, repeat=False))
  shapes = {k: v.shape for k, v in real.items()}
  assert shapes == {k: s.shape for k, s in run.abstract_batch().items()}
  assert shapes == {k: v.shape for k, v in run.family.random_batch(4, run.task_lengths, run.vocab_size).items()}
  assert ("decoder_causal_attention" in shapes) == (objective == "prefix_lm_decoder")


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["clm", "prefix_lm_decoder", "span_corruption"])
def test_bench_times_the_training_step(objective, capsys):
  bench.main.__wrapped__([*TINY, *FAMILY_ARGS[objective], "--config.train.microbatches=2", "--steps=1",
                          "--warmup=0"])
  rows = _table(capsys)
  assert rows["microbatches"][-1] == "2.000"
  cfg = tiny_config(*FAMILY_ARGS[objective])
  row = cfg.data.seq_len if objective == "clm" else cfg.data.inputs_length + cfg.data.targets_length
  assert rows["tokens/step"][-1] == str(cfg.train.batch_size * row)
  assert 0 < float(rows["MFU"][-1]) < 1
  assert float(rows["step s (min)"][-1]) <= float(rows["step s (median)"][-1]) <= float(rows["step s (max)"][-1])


def test_bench_beside_transformers_prints_both_sides_and_the_ratio(capsys):
  """The regression guard of `--compare=hf`: the tiny config on both sides, in turn, and its table."""
  bench.main.__wrapped__([*TINY, "--compare=hf", "--only=config", "--steps=2", "--warmup=0", "--matmuls"])
  out = capsys.readouterr().out
  assert "each compiled alone" in out and "torch plain s" in out
  assert "transformers: torch " in out and "intra-op threads" in out and "sides in turn" in out
  rows = {line.split("  ")[0].strip(): line.split() for line in out.splitlines()}
  assert rows[""] == ["config", "(pretrain)", "config", "(transformers)"]
  assert rows["params"][-2] == rows["params"][-1]  # The same architecture on both sides.
  assert len(rows["step s (median)"]) == 5 and len(rows["tokens/s vs transformers"]) == 4  # Ours only.
  assert float(rows["tokens/s vs transformers"][-1]) > 0 and float(rows["fastest steps vs transformers"][-1]) > 0
  alone = {c: float(rows[f"matmuls alone s ({c})"][-1]) for c in ("XLA", "XLA plain", "torch plain", "best")}
  assert 0 < alone["best"] <= min(alone["XLA"], alone["XLA plain"], alone["torch plain"])
  assert float(rows["vs transformers, if only matmuls"][-1]) > 0


@pytest.mark.parametrize("counterpart, flags, ours", [
    ("adamw", ["--config.optimizer.name=muon"], "muon"),
    ("dense", ["--config.model.moe_experts=4", "--config.model.moe_mlp_dim=32"], "moe")])
def test_bench_times_a_config_against_its_counterpart_in_turn(counterpart, flags, ours, capsys):
  """--compare=adamw (Muon's or Adafactor's step against AdamW's) and --compare=dense (an MoE's against its dense
  counterpart): both steps, in turn, and the ratio of their times; AdamW against itself is refused."""
  bench.main.__wrapped__([*TINY, *flags, f"--compare={counterpart}", "--steps=2", "--warmup=0"])
  out = capsys.readouterr().out
  rows = {line.split("  ")[0].strip(): line.split() for line in out.splitlines()}
  assert rows[""] == [ours, counterpart] and "sides in turn" in out
  assert float(rows[f"step vs {counterpart} (median)"][-1]) > 0
  if counterpart == "adamw":
    assert rows["params"][-2] == rows["params"][-1]  # The same model under both optimizers.
    from pretrain.system.errors import UserError  # pylint: disable=g-import-not-at-top
    with pytest.raises(UserError, match="set optimizer.name"):
      bench.main.__wrapped__([*TINY, "--compare=adamw"])


def test_the_unsplit_counterpart_puts_the_stage_and_context_devices_on_the_data_axis():
  """--compare=unsplit's counterpart (its timing on 8 devices: tools/bench_train.md)."""
  from pretrain.system.errors import UserError  # pylint: disable=g-import-not-at-top
  split = tiny_config("--config.mesh.data=2", "--config.mesh.stage=2", "--config.mesh.stage_repeats=2",
                      "--config.mesh.context=2", "--config.mesh.dcn_stage=2")
  unsplit = bench.unsplit_counterpart(split).mesh
  assert (unsplit.data, unsplit.stage, unsplit.context, unsplit.stage_repeats, unsplit.dcn_stage) == (8, 1, 1, 1, 1)
  assert bench.unsplit_counterpart(tiny_config("--config.mesh.stage=2")).mesh.data == -1
  # The pipeline's 4 microbatches of 4 rows (2 a data shard) accumulated as 2 of 2 rows over 8 data shards.
  pipelined = tiny_config("--config.mesh.data=2", "--config.mesh.stage=4", "--config.train.batch_size=16",
                          "--config.train.microbatches=4")
  assert bench.unsplit_counterpart(pipelined).train.microbatches == 2
  with pytest.raises(UserError, match="set mesh.stage or mesh.context"):
    bench.unsplit_counterpart(tiny_config())


def test_bench_refuses_an_encoder_only_model_and_only_without_compare_hf():
  from pretrain.system.errors import UserError  # pylint: disable=g-import-not-at-top
  for compare in ([], ["--compare=dense"]):  # --only picks among transformers' peers; it was ignored here.
    with pytest.raises(UserError, match="--only=t5 picks what --compare=hf times"):
      bench.main.__wrapped__(["--only=t5", *compare])
  with pytest.raises(UserError, match="not 'mlm'"):
    bench.main.__wrapped__([*TINY, *FAMILY_ARGS["mlm"], "--steps=1", "--warmup=0"])


@pytest.mark.parametrize("objective", FAMILY_ARGS)
def test_estimate_memory_compiles_the_training_step(objective, capsys):
  estimate_memory.main.__wrapped__([*TINY, *FAMILY_ARGS[objective], "--config.train.microbatches=2"])
  out = capsys.readouterr().out
  assert "2 microbatches" in out and "activations_and_temporaries" in out


def test_estimate_memory_counts_the_attention_by_implementation(capsys):
  """The XLA path keeps [L, S] float32 scores per layer for the backward pass, a kernel one value per query;
  T5's biased self-attention stays on the XLA path while its cross-attention takes the kernel."""
  args = [*TINY, "--config.model.num_layers=2", "--no_compile"]
  for name in ("xla", "splash"):
    estimate_memory.main.__wrapped__([*args, "--config.data.seq_len=256", f"--config.model.attention={name}"])
  out = capsys.readouterr().out
  rows, heads, layers = 4, 2, 2  # TINY's batch and heads.
  assert f"({rows * heads * 256 * 256 * 4 * layers:,} bytes)" in out
  assert f"({rows * heads * 256 * 4 * layers:,} bytes)" in out
  estimate_memory.main.__wrapped__([*args, *FAMILY_ARGS["span_corruption"], "--config.data.inputs_length=256",
                                    "--config.data.targets_length=128", "--config.model.attention=splash"])
  table = capsys.readouterr().out.split("by implementation:")[1]
  assert [line.split()[0] for line in table.strip().splitlines()] == ["xla", "splash"]


@pytest.mark.slow
def test_bench_runs_without_the_data_stack():
  """As on an accelerator image with only jax, flax, optax and orbax: TensorFlow, seqio and TFDS cannot be
  imported, and bench still builds, times and checkpoints the step (of the encoder-decoder, whose model
  features take the most of the family's own lengths)."""
  script = ("import sys\n"
            "for name in ('tensorflow', 'seqio', 'tensorflow_datasets', 'tensorflow_text'):\n"
            "  sys.modules[name] = None  # Importing it raises ImportError.\n"
            "from pretrain.commands import bench\n"
            f"bench.main([*{TINY!r}, *{FAMILY_ARGS['span_corruption']!r}, '--steps=1', '--warmup=0'])\n"
            "assert 'tensorflow' not in [m for m in sys.modules if sys.modules[m] is not None]\n")
  result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.count("checkpoint MB") == 1


def test_bench_profile_shares_the_wall_clock_among_the_ops(capsys):
  bench.main.__wrapped__([*TINY, "--steps=1", "--warmup=0", "--profile"])
  out = capsys.readouterr().out
  block = out.split("shared among the ops running at once):\n")[1].split("matmul peak")[0]
  rows = [line.split(None, 1) for line in block.splitlines()]
  totals = {label: float(ms) for ms, label in rows[:3]}
  top = {label: float(ms) for ms, label in rows[3:]}
  assert list(totals) == ["matrix multiplications", "all other ops", "no op running"]
  assert totals["matrix multiplications"] > 0 and totals["all other ops"] > 0 and totals["no op running"] >= 0
  assert top and sum(top.values()) <= totals["all other ops"] + 0.1 * len(top)  # The costliest of the rest.


def test_ops_running_at_once_share_the_wall_clock():
  from pretrain.bench import step_profile  # pylint: disable=g-import-not-at-top
  # Microseconds: a runs 0-40, b 20-40 beside it, then nothing until c at 50-60.
  events = [{"name": "a", "ts": 0, "dur": 40}, {"name": "b", "ts": 20, "dur": 20}, {"name": "c", "ts": 50, "dur": 10}]
  shares, span, busy = step_profile.wall_shares(events)
  assert shares == {"a": 0.03, "b": 0.01, "c": 0.01} and span == 0.06 and busy == 0.05


def _table(capsys) -> dict[str, list[str]]:
  return {line.split("  ")[0].strip(): line.split() for line in capsys.readouterr().out.splitlines()}
