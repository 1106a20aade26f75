"""Curricula (data.schedule): the members and rates of a run's rows as a function of the step, checked with the
config, drawn per row index (so resumable at any step, with any batch size), logged per member."""

import json

import ml_collections
import numpy as np
import pytest

from pretrain import run as run_lib
from pretrain.data import indexed, schedule
from pretrain.system.errors import UserError
from pretrain.train import metrics
from tests.conftest import straight_and_resumed, tiny_config

# CLM and prefix LM train one decoder-only model; a prefix-LM row holds inputs + targets = the CLM row's 32 tokens.
DECODER = ("--config.data.objective=prefix_lm_decoder", "--config.data.inputs_length=16",
           "--config.data.targets_length=16")
CLM_THEN_PREFIX = "((0, (('clm', 1.0),), 'ramp'), (6, (('prefix_lm_decoder', 1.0),)))"


def _data(**fields) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({"objective": "clm", "source": "corpus", "train_files": "", "tfds_name": "",
                                    "mixture": (), "schedule": (), **fields})


def test_stages_ramps_and_the_one_stage_default():
  fixed = schedule.parse(_data())
  assert fixed.fixed and fixed.names == ("clm",) and list(fixed.rates_at(10**6)) == [1.0]
  mixed = schedule.parse(_data(mixture=(("corpus", "", 1.0), ("files", "a/*.txt", 3.0))))
  assert mixed.fixed and mixed.names == ("clm@0", "clm@1") and list(mixed.rates_at(5)) == [0.25, 0.75]
  s = schedule.parse(_data(schedule=((0, (("clm", 3.0), ("fim", 1.0))), (10, (("clm", 1.0),), "ramp"),
                                     (20, (("fim", 1.0), ("clm", "files", "a/*.txt", 1.0))))))
  assert s.names == ("clm@0", "fim", "clm@2") and not s.fixed
  np.testing.assert_allclose(s.rates_at(9), [0.75, 0.25, 0])
  np.testing.assert_allclose(s.rates_at(10), [1, 0, 0])
  np.testing.assert_allclose(s.rates_at(15), [0.5, 0.25, 0.25])  # Halfway along the ramp.
  np.testing.assert_allclose(s.rates_at(25), [0, 0.5, 0.5])
  assert "from step 10: clm@0 1.00, moving linearly to step 20's" in s.describe()
  over_ptb = schedule.parse(_data(source="ptb", schedule=((0, (("clm", 1.0),)), (5, (("prefix_lm_decoder", 1.0),)))))
  assert {m.source for m in over_ptb.members} == {"ptb"}  # The Penn Treebank was refused as a member's source.
  assert schedule.parse(_data(mixture=(("ptb", "", 1.0), ("corpus", "", 1.0)))).members[0].source == "ptb"


@pytest.mark.parametrize("stages, message", [
    ("((5, (('clm', 1.0),)),)", "the first must start at 0"),
    ("((0, (('clm', 1.0),)), (9, (('fim', 1.0),)), (4, (('clm', 1.0),)))", "after the one before it"),
    ("((0, (('clm', 0.0),)),)", "rates summing to 0.0"),
    ("((0, (('clm', 1.0),)), (9, (('fim', 1.0),), 'ramp'))", "ramps towards no stage"),
    ("((0, (('clm', 'web', '', 1.0),)),)", "member ('clm', 'web', '', 1.0)"),
    ("((0, (('clm', 1.0), ('clm', 2.0))),)", "names clm over corpus twice"),
    ("((0, (('clm', 1.0),), 'slow'),)", "write (from_step, members)"),
])
def test_an_invalid_schedule_is_refused_with_one_line(stages, message):
  with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
    run_lib.Run.build(tiny_config(f"--config.data.schedule={stages}"), 128)


@pytest.mark.parametrize("args, message", [
    (["--config.data.objective=clm", "--config.data.schedule=((0, (('clm', 1.0), ('span_corruption', 1.0))),)"],
     "span_corruption trains an encoder-decoder model"),
    (["--config.data.objective=clm", f"--config.data.schedule={CLM_THEN_PREFIX}", *DECODER[1:]],
     "set --config.data.objective=prefix_lm_decoder"),
    (["--config.data.objective=ul2", "--config.data.schedule=((0, (('clm', 1.0),)),)"], "data.objective='ul2' is"),
    ([*DECODER[:1], "--config.data.schedule=((0, (('clm', 1.0), ('prefix_lm_decoder', 1.0))),)"],
     "rows of 32 tokens"),
    (["--config.data.objective=nsp", "--config.data.schedule=((0, (('nsp', 1.0),)), (5, (('sop', 1.0),)))"],
     "cannot share"),
    ([*DECODER, f"--config.data.schedule={CLM_THEN_PREFIX}", "--config.data.pipeline=replay"],
     "data.pipeline=indexed"),
])
def test_a_schedule_whose_members_cannot_train_one_model_is_refused(args, message):
  with pytest.raises(UserError, match=message):
    run_lib.Run.build(tiny_config(*args), 128)


def test_realised_shares_follow_the_stages_and_the_ramp():
  s = schedule.parse(_data(schedule=((0, (("clm", 3.0), ("fim", 1.0))), (100, (("clm", 1.0),), "ramp"),
                                     (300, (("fim", 1.0),)))))
  rows_per_step = 50
  drawn = np.fromiter(indexed.member_choices(s, seed=0, stream=0, first_row=0, first_step=0,
                                             rows_per_step=rows_per_step).take(20_000).as_numpy_iterator(), np.int64)
  step = np.arange(len(drawn)) // rows_per_step

  def share_of_fim(lo, hi):
    return np.mean(drawn[(step >= lo) & (step < hi)] == 1)

  def within_sampling_error(observed, expected, n):  # 4 standard errors of a binomial share.
    assert abs(observed - expected) <= 4 * np.sqrt(max(expected * (1 - expected), 1e-12) / n) + 1e-9, \
        (observed, expected)

  within_sampling_error(share_of_fim(0, 100), 0.25, 5000)
  within_sampling_error(share_of_fim(300, 400), 1.0, 5000)
  # The ramp, by quarters: the mean scheduled share over each quarter's steps.
  for lo in range(100, 300, 50):
    expected = np.mean([s.rates_at(t)[1] for t in range(lo, lo + 50)])
    within_sampling_error(share_of_fim(lo, lo + 50), expected, 2500)
  assert share_of_fim(100, 101) < 0.1 and share_of_fim(299, 300) > 0.8


def _run(cache_dir, *args):
  return run_lib.Run.build_with_data(tiny_config(f"--config.data.cache_dir={cache_dir}", *args))


def _take(batches, n):
  return [next(batches) for _ in range(n)]


def test_the_one_stage_schedule_gives_todays_batches(cache_dir, vocabulary):
  del vocabulary
  today = _take(_run(cache_dir).train_batches(), 3)
  one_stage = _take(_run(cache_dir, "--config.data.schedule=((0, (('clm', 1.0),)),)").train_batches(), 3)
  for a, b in zip(today, one_stage):
    assert a.keys() == b.keys()
    for k in a:
      np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.slow
def test_another_batch_size_continues_each_members_rows(cache_dir, vocabulary):
  del vocabulary
  switch = "--config.data.schedule=((0, (('clm', 1.0),)), (3, (('fim', 1.0),)))"
  clm_alone = _take(_run(cache_dir).train_batches(), 4)  # Rows of 4: the schedule's first member, alone.
  run = _run(cache_dir, switch, "--config.data.objective=fim")
  straight = run.train_batches()
  first = _take(straight, 2)
  position = straight.position()
  later = _take(straight, 4)  # Step 2 (clm), then 3, 4, 5 (fim).
  for got, want in zip(first + later[:1], clm_alone[:3]):
    np.testing.assert_array_equal(got["decoder_target_tokens"], want["decoder_target_tokens"])
  assert set(np.unique(later[1]["member"])) == {1}
  # Resumed at step 2 with rows of 8: step 2 takes clm's next 8 rows, step 3 fim's first 8.
  bigger = tiny_config(f"--config.data.cache_dir={cache_dir}", switch, "--config.data.objective=fim",
                       "--config.train.batch_size=8")
  resumed = run_lib.Run.build_with_data(bigger).train_batches(position, step=2)
  step2, step3 = _take(resumed, 2)
  np.testing.assert_array_equal(step2["decoder_target_tokens"],
                                np.concatenate([b["decoder_target_tokens"] for b in clm_alone[2:4]]))
  np.testing.assert_array_equal(step3["decoder_target_tokens"],
                                np.concatenate([b["decoder_target_tokens"] for b in later[1:3]]))


_CURRICULUM = (*DECODER, f"--config.data.schedule={CLM_THEN_PREFIX}", "--config.train.steps=12",
               "--config.train.checkpoint_every=4", "--config.train.eval_every=12")


@pytest.mark.slow
def test_a_curriculum_killed_inside_its_ramp_resumes_bit_identically(tmp_path, run_train):
  straight, killed = straight_and_resumed(run_train, tmp_path, _CURRICULUM, step=4)

  def train_records(workdir):
    return {r["step"]: {k: v for k, v in r.items() if k.startswith(("train/loss", "train/member/", "data/"))}
            for r in metrics.read(str(workdir)) if "train/loss" in r}

  expected, got = train_records(tmp_path / "straight"), train_records(killed)
  assert sorted(got) == list(range(1, 13)) and all(got[s] == expected[s] for s in range(5, 13))
  # Per member: its loss while it has rows, and its scheduled rate.
  assert "train/member/clm/loss" in expected[1] and expected[1]["data/rate/clm"] > 0.8
  assert "train/member/clm/loss" not in expected[12] and expected[12]["data/rate/prefix_lm_decoder"] == 1.0
  last = [r for r in metrics.read(str(tmp_path / "straight")) if "eval/loss" in r][-1]
  assert {"eval/loss", "eval/corpus_clm/loss", "eval/corpus_clm/bits_per_byte"} <= set(last)
  assert json.loads((tmp_path / "straight" / "config.json").read_text())["data"]["schedule"]


@pytest.mark.slow
@pytest.mark.parametrize("warmup, rows", [("tokens", (16, 8, 4)), ("rows", (4, 4, 4))])
def test_sequence_length_warmup(cache_dir, vocabulary, warmup, rows):
  del vocabulary
  run = _run(cache_dir, "--config.data.length_schedule=((0, 8), (4, 16), (8, 32))",
             f"--config.data.length_warmup={warmup}")
  batches, positions = run.train_batches(), {}
  straight = []
  for step in range(10):
    positions[step] = batches.position()  # Where a resume at this step starts (a copy).
    straight.append(next(batches))
  shapes = [b["decoder_target_tokens"].shape for b in straight]
  assert shapes == [(rows[0], 8)] * 4 + [(rows[1], 16)] * 4 + [(rows[2], 32)] * 2
  if warmup == "rows":
    return  # Resuming and compiling are the same as with 'tokens', tested below.
  # Resumed in the first stage (crossing two stage starts) and inside the second: the same batches.
  for taken in (3, 6):
    resumed = _take(run.train_batches(positions[taken], step=taken), 10 - taken)
    for got, want in zip(resumed, straight[taken:]):
      for k in want:
        np.testing.assert_array_equal(got[k], want[k])
  # One compilation per row length.
  from pretrain.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
  with run.activated():
    state = run.create_state()
    for batch in straight:
      state, _ = run.train_step(state, mesh_lib.global_batch(batch, run.batch_sharding))
  assert run.train_step._cache_size() == 3  # pylint: disable=protected-access


@pytest.mark.slow
def test_after_a_rollback_the_schedule_follows_the_model_s_step(cache_dir, vocabulary):
  """A spike guard's rollback to step 0 after 6 batches: the next rows are drawn at step 0's rates (clm), as a run
  resumed there from the data's position reads them, not at the data's step 6 (prefix LM)."""
  del vocabulary
  run = _run(cache_dir, *DECODER, "--config.data.schedule=((0, (('clm', 1.0),)), (4, (('prefix_lm_decoder', 1.0),)))")
  batches = run.train_batches()
  assert {int(next(batches)["member"].max()) for _ in range(6)} == {0, 1}
  resumed = run.train_batches(batches.position(), step=0)
  batches.continue_at(0)
  after, want = next(batches), next(resumed)
  assert not after["member"].any()  # Every row clm's, member 0.
  for k in want:
    np.testing.assert_array_equal(after[k], want[k])


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["mlm", "nsp"])
def test_sequence_length_warmup_of_an_encoder_s_row(cache_dir, vocabulary, objective):
  """An MLM row's three task features are one sequence of data.seq_len, and NSP's label is no token: the stages
  are lengths of that row (they were measured as the features' sum, 96 here, and NSP's every shorter stage refused)."""
  del vocabulary
  run = _run(cache_dir, f"--config.data.objective={objective}", "--config.data.length_schedule=((0, 16), (2, 32))")
  batches = run.train_batches()
  taken = [next(batches) for _ in range(3)]
  assert [b["encoder_input_tokens"].shape for b in taken] == [(8, 16), (8, 16), (4, 32)]
  if objective == "nsp":
    assert [b["encoder_pair_labels"].shape for b in taken] == [(8, 1), (8, 1), (4, 1)]


@pytest.mark.parametrize("args, message", [
    (["--config.data.length_schedule=((0, 8), (4, 16))"], "its last stage must be the config's row of 32"),
    (["--config.data.length_schedule=((0, 12), (4, 32))"], "must divide the row of 32"),
    (["--config.data.length_schedule=((0, 16), (0, 32))"], "after the one before it"),
    (["--config.data.length_schedule=((0, 16), (4, 32))", "--config.data.pipeline=replay"], "data.pipeline=indexed"),
    (["--config.data.length_warmup=both"], "data.length_warmup"),
])
def test_an_invalid_length_schedule_is_refused(args, message):
  with pytest.raises(UserError, match=message):
    run_lib.Run.build(tiny_config(*args), 128)


def test_stages_the_run_never_reaches_are_said():
  """A stage from step 10 of a 4-step run trains no row: the whole run is the first stage's, said in one line."""
  stages = "--config.data.schedule=((0, (('clm', 1.0),)), (10, (('fim', 1.0),)))"
  run = run_lib.Run.build(tiny_config(stages, "--config.data.length_schedule=((0, 16), (10, 32))",
                                      "--config.train.steps=4"), 128)
  assert schedule.unreached(run.schedule, run.length_stages, 4) == (
      "Note: data.schedule's stage from step 10 and data.length_schedule's stage from step 10 start at or after "
      "train.steps=4: the run never trains them (a longer run, or a resume to more steps, does)")
  assert schedule.unreached(run.schedule, run.length_stages, 11) is None


def test_a_changed_schedule_on_resume_is_said_and_followed(capsys):
  old = indexed.start_position("corpus_clm", 0, 1, ["s", "s"], [64, 64],
                               {"members": ["corpus_clm", "corpus_fim"], "stages": "from step 0: clm 1.00"})
  old["streams"][0] = {"rows": 40, "members": [[0, 30], [0, 10]]}
  new = indexed.start_position("corpus_clm", 0, 1, ["s", "s"], [64, 64],
                               {"members": ["corpus_clm", "corpus_fim"], "stages": "from step 0: fim 1.00"})
  resumed = indexed.resume_position(old, new)
  assert resumed["streams"] == old["streams"] and resumed["schedule"]["stages"] == "from step 0: fim 1.00"
  assert "data.schedule changed since the checkpoint" in capsys.readouterr().out
  other = indexed.start_position("corpus_clm", 0, 1, ["s", "s"], [64, 64],
                                 {"members": ["corpus_fim", "corpus_clm"], "stages": "from step 0: fim 1.00"})
  assert indexed.resume_position(old, other) == other  # Other members: from the start, said.
  assert "members changed" in capsys.readouterr().out


def test_inspect_task_shows_a_steps_members(cache_dir, vocabulary, monkeypatch, capsys):
  del vocabulary
  from pretrain.commands import inspect_task  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  inspect_task.main(["--step=3", "--num=4", "--config=configs/quickstart.py", "--config.data.seq_len=32",
                     *DECODER, f"--config.data.schedule={CLM_THEN_PREFIX}"])
  shown = capsys.readouterr().out
  assert shown.startswith("data.schedule at step 3: clm 0.50, prefix_lm_decoder 0.50\n")
  assert shown.count("=== step 3, row ") == 4 and "--- targets" in shown


def test_inspect_task_reads_any_split_of_the_source_and_names_a_missing_one(cache_dir, vocabulary, monkeypatch,
                                                                              capsys):
  """The bundled corpus's held-out split is inspected as pretrain eval reads it; the test split, which only the
  Penn Treebank has, is refused by name."""
  del vocabulary
  from pretrain.commands import inspect_task  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  flags = ["--task=corpus_clm", "--num=1", "--config=configs/quickstart.py", "--config.data.seq_len=32"]
  inspect_task.main([*flags, "--split=downstream"])
  assert "=== corpus_clm example 0 (downstream)" in capsys.readouterr().out
  with pytest.raises(SystemExit):
    inspect_task.main([*flags, "--split=test"])
  assert "--split=test: the source corpus has no such split; use one of train, validation, downstream" in \
      capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", ["indexed", "replay"])
def test_a_fixed_mixture_trains_with_either_pipeline(cache_dir, vocabulary, tmp_path, pipeline):
  """The indexed pipeline says each row's source, so a mixture's members are reported one by one; the replay
  pipeline's seqio Mixture does not, and its step reports none."""
  del vocabulary
  from pretrain.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
  (tmp_path / "zebra.txt").write_text("\n".join(f"zebra {i} " * 20 for i in range(100)))
  run = _run(cache_dir, f"--config.data.mixture=(('corpus', '', 1.0), ('files', '{tmp_path}/*.txt', 1.0))",
             f"--config.data.pipeline={pipeline}")
  with run.activated():
    _, step_metrics = run.train_step(run.create_state(),
                                     mesh_lib.global_batch(next(run.train_batches()), run.batch_sharding))
  assert run.schedule.names == ("clm@0", "clm@1")
  if pipeline == "indexed":
    assert step_metrics["member_loss"].shape == (2,) and float(step_metrics["member_weight"].sum()) > 0
  else:
    assert "member_loss" not in step_metrics


def test_a_record_s_rates_are_those_of_the_step_inspect_task_shows_one_before():
  """metrics.jsonl's step counts the steps done: its data/rate at step S + 1 is the rate of step S, counted from 0
  as the schedule and `inspect-task --step=S` count (docs/guide/objectives.md)."""
  from pretrain.train import loop  # pylint: disable=g-import-not-at-top
  ramp = "--config.data.schedule=((0, (('clm', 3.0), ('fim', 1.0)), 'ramp'), (16, (('fim', 1.0),)))"
  run = run_lib.Run.build(tiny_config(ramp, "--config.train.steps=20"), 128)
  for step in (1, 5, 16):
    logged = loop.train_values(run, {"loss": 1.0}, step)
    assert [logged["data/rate/clm"], logged["data/rate/fim"]] == list(run.schedule.rates_at(step - 1))
  assert run.schedule.rates_at(4)[0] == pytest.approx(0.5625)  # Step 4 of the ramp: the record of step 5 logs it.
