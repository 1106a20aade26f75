"""Downstream evaluation of a pre-trained model, on documents no run pre-trains on by default.

- probe: linear probes of frozen representations; the same-document probe (do two passages come from one
  document?), a task that needs no labels;
- topics: a labelled task, which standard-library package a docstring of the bundled corpus comes from, by a
  linear probe and by fine-tuning (finetune);
- stats: means over seeds with their 95% intervals.

Every figure is reported beside the same architecture at its initial parameters (the baseline pre-training must
beat); `pretrain probe` is the command line.
"""
