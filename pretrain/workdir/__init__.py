"""A training run's workdir: checks before a run uses it, and the files that describe the run.

Beside checkpoints/ and the metrics, a workdir holds config.json (the resolved
config) and spm.model or tokenizer.json (the vocabulary): what eval, generate and export read.
Each checkpoint also records the run's id and config (checkpoint.Checkpointer.records): a
training run resumes as its checkpoints say, and moves aside the workdir's files that are not
what it wrote (pretrain/system/aside.py).
"""

from pretrain.workdir.checks import check_layout, check_resume, check_same_model, check_writable
from pretrain.workdir.run_files import (CURATION_FILE, VOCAB_FILES, file_sha256, resumed_config, saved_config,
                                        set_aside_misplaced, vocabulary_file, write_run_files)

__all__ = ["CURATION_FILE", "VOCAB_FILES", "check_layout", "check_resume", "check_same_model", "check_writable",
           "file_sha256", "resumed_config", "saved_config", "set_aside_misplaced", "vocabulary_file",
           "write_run_files"]
