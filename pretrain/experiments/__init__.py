"""Experiments that train a series of small models and report on them: which objective (compare_objectives),
how big a model (scaling) and how clean the data (data_quality, with the defects of web_defects).
tools/compare_objectives.py, tools/scaling.py and tools/data_quality.py are their command lines; runs holds
what they share.
"""
