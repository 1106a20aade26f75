"""Experiments that train a series of small models and report on them: which objective
(compare_objectives) and how big a model (scaling). tools/compare_objectives.py and
tools/scaling.py are their command lines; runs holds what both share.
"""
