"""The downstream measures of a run's parameters, each over seeds: what `pretrain probe` and the objective
comparison report, beside the same measures of the initial parameters."""

from pretrain.downstream import finetune as finetune_lib, probe, topics, zero_shot

TASKS = ("zero_shot", "same_document", "packages")


def measure(run, params, task: str, seeds: int, finetune: int = 0, split: str | None = None,
            max_documents: int = 2000, scorer=None, limit: int | None = None,
            finetune_lr: float | None = None) -> dict:
  """{measure: [its value per seed], ..., 'about': what was read}: for 'same_document', the probe's test accuracy
  per probe seed (which documents fit it, which pairs); for 'packages', the linear probe's test accuracy (one:
  it draws nothing) and, with `finetune` steps, the fine-tuned model's per fine-tuning seed (at `finetune_lr`,
  None: finetune.py's rate); for 'zero_shot',
  each zero-shot task's accuracy on its first `limit` items (None: all; one value: it draws nothing; `scorer`: a
  likelihood.Scorer of the run to reuse)."""
  if task == "zero_shot":
    # Span forms where the objective has them; tasks whose texts the model's rows cannot hold are named, unscored.
    scores, not_scored = zero_shot.evaluate(run, params, scorer=scorer, limit=limit)
    return {**{name: [value] for name, value in scores.items()},
            "about": {"version": zero_shot.VERSION, "chance": {name: zero_shot.CHANCE[name] for name in scores},
                      "items": {name: len(zero_shot.load(name)[:limit]) for name in zero_shot.TASKS},
                      **({"not_scored": not_scored} if not_scored else {})}}
  with run.activated():
    if task == "same_document":
      split, documents = probe.run_documents(run, split, max_documents)
      results = probe.same_document_probe(run.family, run.model, params, documents, range(seeds))
      return {"same_document_probe": [r["accuracy"] for r in results],
              "about": {"split": split, "documents": results[0]["documents"], "test_pairs": results[0]["test_pairs"]}}
    names, splits = topics.task(run.vocabulary)
    linear = topics.linear_probe(run.family, run.model, params, names, splits)
    values = {"package_probe": [linear["accuracy"]],
              "about": {"classes": len(names), "documents": linear["documents"]}}
    if finetune:
      rate = finetune_lib.LEARNING_RATE if finetune_lr is None else finetune_lr
      values["package_finetune"] = [finetune_lib.finetune(run.family, run.model, params, names, splits,
                                                          steps=finetune, seed=seed, learning_rate=rate)["accuracy"]
                                    for seed in range(seeds)]
      values["about"]["finetune_lr"] = rate
    return values
