"""Experiments that train a series of small models and report on them: which objective (compare_objectives),
how big a model (scaling), how clean the data (data_quality, with the defects of web_defects), and the others
`pretrain experiment --help` lists; `pretrain experiment NAME` is each one's command line (commands/experiment.py),
and runs holds what they share.
"""
