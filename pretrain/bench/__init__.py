"""Benchmark and profiling helpers: the input pipeline's throughput (data_throughput), the time to resume
(resume_time), the train step's matrix products against this machine's kernels (matmul_floor), a profile of
the step (step_profile) and the transformers peer (hf_peer). `pretrain bench` and tools/bench_*.py are
their command lines; the figures are in tools/bench_*.md."""
